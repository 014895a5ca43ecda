package pd_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// TestVLLMPrefillStopsOnlyByCap: the prefill leg ignores EOS and carries no
// stop conditions (its one token must end by the cap for the connector to
// hand off); the decode leg keeps the client's.
func TestVLLMPrefillStopsOnlyByCap(t *testing.T) {
	f := startFleet(t, spec.EngineVLLM)
	d := mustDialect(t, spec.EngineVLLM)
	body := `{"model":"m","prompt":"p","max_tokens":16,"stop":["\n\n","END"],"stop_token_ids":[2],"include_stop_str_in_output":true}`
	res := f.do(t, d, pathCompletions, body, pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, 0)
	if res.status != 200 {
		t.Fatalf("client got %d: %s", res.status, res.body)
	}
	p := waitLegs(t, f.prefill, 1)[0]
	dl := waitLegs(t, f.dec, 1)[0]
	var pb, db map[string]json.RawMessage
	if err := json.Unmarshal(p.Body, &pb); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(dl.Body, &db); err != nil {
		t.Fatal(err)
	}
	if string(pb["ignore_eos"]) != "true" {
		t.Errorf("prefill ignore_eos = %s, want true: %s", pb["ignore_eos"], p.Body)
	}
	for _, k := range []string{"stop", "stop_token_ids", "include_stop_str_in_output"} {
		if _, ok := pb[k]; ok {
			t.Errorf("prefill leg kept %s: %s", k, p.Body)
		}
	}
	for k, want := range map[string]string{"stop": `["\n\n","END"]`, "stop_token_ids": `[2]`, "include_stop_str_in_output": `true`} {
		if string(db[k]) != want {
			t.Errorf("decode %s = %s, want the client's %s", k, db[k], want)
		}
	}
	if _, ok := db["ignore_eos"]; ok {
		t.Errorf("decode leg got ignore_eos: %s", dl.Body)
	}
}

// badPrefill is a vLLM prefill that answers every request with params.
func badPrefill(t *testing.T, params string) spec.Endpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":"length"}],"kv_transfer_params":` + params + `}`))
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1, Role: spec.RolePrefill}
}

// TestVLLMInvalidHandoffNeverReachesDecode: a malformed handoff is answered
// 502 pd_handoff_invalid naming the field, and the decode engine receives
// nothing.
func TestVLLMInvalidHandoffNeverReachesDecode(t *testing.T) {
	tests := []struct{ name, params, field string }{
		{"string block id", `{"remote_engine_id":"e","remote_block_ids":[0,"1"],"remote_host":"127.0.0.5","remote_port":5600}`, "remote_block_ids[1]"},
		{"empty engine id", `{"remote_engine_id":"","remote_block_ids":[0]}`, "remote_engine_id"},
		{"host with whitespace", `{"remote_engine_id":"e","remote_block_ids":[0],"remote_host":"127.0.0.5 x"}`, "remote_host"},
		{"port out of range", `{"remote_engine_id":"e","remote_block_ids":[0],"remote_port":70000}`, "remote_port"},
		{"count not an integer", `{"remote_engine_id":"e","remote_block_ids":[0],"tp_size":"one"}`, "tp_size"},
		{"not an object", `"e"`, "kv_transfer_params"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, spec.EngineVLLM)
			d := mustDialect(t, spec.EngineVLLM)
			pair := pd.Pair{Prefill: badPrefill(t, tc.params), Decode: f.dec.Endpoint()}
			res := f.do(t, d, pathCompletions, clientBody(pathCompletions, false), pair, 0)
			if res.status != http.StatusBadGateway || res.header.Get("X-Infergate-Error") != pd.CodeHandoffInvalid {
				t.Fatalf("client got %d %q: %s", res.status, res.header.Get("X-Infergate-Error"), res.body)
			}
			if !strings.Contains(res.body, tc.field) {
				t.Errorf("error does not name %s: %s", tc.field, res.body)
			}
			if !res.out.HandoffInvalid || res.out.Code != pd.CodeHandoffInvalid || res.out.FailedPhase != pd.PhasePrefill {
				t.Errorf("outcome = %+v", res.out)
			}
			if n := len(f.dec.Records()); n != 0 {
				t.Errorf("decode received %d requests after an invalid handoff", n)
			}
			for _, l := range res.out.Legs {
				if l.Phase == pd.PhaseDecode {
					t.Errorf("a decode leg was sent: %+v", l)
				}
			}
		})
	}
}

// TestSGLangEndpointBootstrapPort: a prefill's own bootstrap_port wins over
// the rule's pdBootstrapPort in both legs' bootstrap triple.
func TestSGLangEndpointBootstrapPort(t *testing.T) {
	f := startFleet(t, spec.EngineSGLang)
	f.rule.PD.BootstrapPort = 1 // wrong on purpose: the endpoint's port must be used
	d := mustDialect(t, spec.EngineSGLang)
	p := f.prefill.Endpoint()
	p.BootstrapPort = f.prefill.BootstrapPort()
	res := f.do(t, d, pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: p, Decode: f.dec.Endpoint()}, 0)
	if res.status != 200 {
		t.Fatalf("client got %d: %s", res.status, res.body)
	}
	for _, r := range []pdfake.Record{waitLegs(t, f.prefill, 1)[0], waitLegs(t, f.dec, 1)[0]} {
		var b struct {
			Port int `json:"bootstrap_port"`
		}
		if err := json.Unmarshal(r.Body, &b); err != nil || b.Port != int(p.BootstrapPort) {
			t.Errorf("leg bootstrap_port = %d (%v), want the endpoint's %d", b.Port, err, p.BootstrapPort)
		}
	}
}
