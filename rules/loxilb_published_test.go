package rules

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
)

// Rule bodies in the shapes LoxiLB's inference-gateway repository publishes
// in its docs and cicd scripts (values varied). What LoxiLB's own tests
// expect to be refused is refused; what infergate does not serve is refused
// as unsupported naming the field; the rest is accepted unchanged.
func TestLoxiLBPublishedBodies(t *testing.T) {
	const pdEps = `"endpoints":[{"endpointIP":"31.31.31.1","targetPort":8000,"weight":1,"ep_role":1,"nixl_port":9001},` +
		`{"endpointIP":"32.32.32.1","targetPort":8000,"weight":1,"ep_role":2,"nixl_port":9002}]`
	const plainEps = `"endpoints":[{"endpointIP":"31.31.31.1","targetPort":8085,"weight":1},{"endpointIP":"32.32.32.1","targetPort":8085,"weight":1}]`
	sa := func(fields string) string {
		return `{"serviceArguments":{"externalIP":"10.10.10.254","port":2099,"protocol":"tcp",` + fields + `},`
	}
	tests := []struct {
		name, body, code, field string
	}{
		// Accepted.
		{"vllm P/D with probes", sa(`"sel":0,"mode":4,"pd_disagg_mode":true,"sse_mode":true,"host":"10.10.10.254","monitor":true,`+
			`"probetype":"http","probeport":8000,"probereq":"/health","probeTimeout":5,"probeRetries":2`) + pdEps + `}`, "", ""},
		{"kv-exact replace", sa(`"sel":0,"mode":4,"host":"10.10.10.254","model_name":"Qwen/Qwen3-0.6B","pd_disagg_mode":true,`+
			`"probeRetries":1,"kvExactMode":1,"kvZmqPort":5557,"kvHashAlgo":"sha256_cbor","kvWarmupSec":20,"kvBlockSize":16`) + pdEps + `}`, "", ""},
		{"sglang P/D bootstrap", sa(`"sel":0,"mode":4,"pd_disagg_mode":true,"kvEngineType":"sglang","pdBootstrapPort":9998,`+
			`"sse_mode":true,"cb_enable":true`) + strings.ReplaceAll(strings.ReplaceAll(pdEps, `,"nixl_port":9001`, ""), `,"nixl_port":9002`, "") + `}`, "", ""},
		{"llamacpp chwbl", sa(`"sel":8,"mode":4,"kvEngineType":"llamacpp","host":"10.10.10.254"`) + plainEps + `}`, "", ""},
		{"llamacpp rr session", sa(`"sel":0,"mode":4,"kvEngineType":"llamacpp","session_header_name":"X-Session-ID"`) + plainEps + `}`, "", ""},
		{"trtllm P/D", sa(`"sel":0,"mode":4,"pd_disagg_mode":true,"kvEngineType":"trtllm","kvExactMode":1`) +
			strings.ReplaceAll(strings.ReplaceAll(pdEps, `,"nixl_port":9001`, ""), `,"nixl_port":9002`, "") + `}`, "", ""},
		// LoxiLB's own negative tests: refused here too.
		{"llamacpp + kvExactMode", sa(`"sel":8,"mode":4,"kvEngineType":"llamacpp","kvExactMode":3`) + plainEps + `}`,
			apierror.CodeUnsupported, "serviceArguments.kvExactMode"},
		{"llamacpp + P/D", sa(`"sel":0,"mode":4,"kvEngineType":"llamacpp","pd_disagg_mode":true`) + pdEps + `}`,
			apierror.CodeUnsupported, "serviceArguments.pd_disagg_mode"},
		{"llamacpp + kvZmqPort", sa(`"sel":8,"mode":4,"kvEngineType":"llamacpp","kvZmqPort":5561`) + plainEps + `}`,
			apierror.CodeInvalidCombo, "serviceArguments.kvZmqPort"},
		{"trtllm + nats", sa(`"sel":0,"mode":4,"pd_disagg_mode":true,"kvEngineType":"trtllm","kvExactMode":2`) + pdEps + `}`,
			apierror.CodeInvalidCombo, "serviceArguments.kvExactMode"},
		{"trtllm + kvZmqPort", sa(`"sel":0,"mode":4,"pd_disagg_mode":true,"kvEngineType":"trtllm","kvExactMode":1,"kvZmqPort":5561`) + pdEps + `}`,
			apierror.CodeInvalidCombo, "serviceArguments.kvZmqPort"},
		// Not served by infergate.
		{"classic L4 minimal", sa(`"sel":0`) + plainEps + `}`, apierror.CodeUnsupported, "serviceArguments.mode"},
		{"classic L4 with loxicmd keys", sa(`"sel":0,"mode":0,"BGP":false,"monitor":false,"inactiveTimeOut":240`) +
			`"endpoints":[{"endpointIP":"31.31.31.1","weight":1,"targetPort":5001,"state":"active"}]}`, apierror.CodeUnsupported, "serviceArguments.mode"},
		// Served (the certificate is checked at install).
		{"TLS-terminated P/D", sa(`"sel":0,"mode":4,"security":1,"pd_disagg_mode":true`) + pdEps + `}`, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DecodeJSON([]byte(tc.body))
			if err == nil {
				err = Validate(r)
			}
			if tc.code == "" {
				if err != nil {
					t.Fatalf("refused: %v\n%s", err, tc.body)
				}
				return
			}
			wantAPIError(t, err, 400, tc.code, tc.field, "")
		})
	}
}
