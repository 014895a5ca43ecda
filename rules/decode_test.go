package rules

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeJSONFixture(t *testing.T) {
	r, err := DecodeJSON(readTestdata(t, "pd_vllm.json"))
	if err != nil {
		t.Fatalf("DecodeJSON: %v", err)
	}
	if got := r.ServiceArguments; got.KVExactMode != 1 || !got.PDDisaggMode || got.ExternalIP != "192.0.2.12" || got.PathMatchMode != "disabled" {
		t.Errorf("unexpected service args %+v", got)
	}
	if len(r.Endpoints) != 2 || r.Endpoints[1].NixlPort != 9002 || r.Endpoints[1].EPRole != 2 {
		t.Errorf("unexpected endpoints %+v", r.Endpoints)
	}
	if _, err := Compile(r); err != nil {
		t.Errorf("Compile: %v", err)
	}
}

// Escaped keys are matched after unescaping, like encoding/json does.
func TestDecodeJSONEscapedKeys(t *testing.T) {
	body := `{"service\u0041rguments":{"externalIP":"10.0.0.1","p\u006frt":80,"protocol":"tcp","mode":4},` +
		`"endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1}]}`
	r, err := DecodeJSON([]byte(body))
	if err != nil {
		t.Fatalf("DecodeJSON: %v", err)
	}
	if r.ServiceArguments.Port != 80 || r.ServiceArguments.ExternalIP != "10.0.0.1" {
		t.Errorf("got %+v", r.ServiceArguments)
	}
}

func TestDecodeJSONOutputOnlyKeysAccepted(t *testing.T) {
	r, err := DecodeJSON(readTestdata(t, "get_body.json"))
	if err != nil {
		t.Fatalf("DecodeJSON of a GET body: %v", err)
	}
	if r.Status != nil || r.Endpoints[0].State != "" || r.Endpoints[0].Counter != "" || r.Endpoints[0].WindowLoad != "" {
		t.Errorf("output-only fields not cleared: %+v %+v", r.Status, r.Endpoints[0])
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	const sa = `"serviceArguments":{"externalIP":"10.0.0.1","port":80,"protocol":"tcp","mode":4}`
	const ep = `"endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1}]`
	tests := []struct {
		name       string
		body       string
		code       string
		field      string
		msgContain string
	}{
		{"snake instead of camel", `{"serviceArguments":{"externalIP":"10.0.0.1","kv_exact_mode":1},` + ep + `}`,
			apierror.CodeUnknownField, "serviceArguments.kv_exact_mode", `did you mean "kvExactMode"`},
		{"camel instead of snake", `{"serviceArguments":{"pdDisaggMode":true},` + ep + `}`,
			apierror.CodeUnknownField, "serviceArguments.pdDisaggMode", `did you mean "pd_disagg_mode"`},
		{"mis-cased and misspelled", `{"serviceArguments":{"ExternalIPs":"10.0.0.1"},` + ep + `}`,
			apierror.CodeUnknownField, "serviceArguments.ExternalIPs", `did you mean "externalIP"`},
		{"endpoint key with index", `{` + sa + `,"endpoints":[{"endpointIP":"10.1.0.1","targetPort":1,"weight":1},{"endpointIP":"10.1.0.2","targetPort":1,"weight":1,"nixlPort":9}]}`,
			apierror.CodeUnknownField, "endpoints[1].nixlPort", `did you mean "nixl_port"`},
		{"typo by edit distance", `{"serviceArguments":{"kvEngneType":"vllm"},` + ep + `}`,
			apierror.CodeUnknownField, "serviceArguments.kvEngneType", `did you mean "kvEngineType"`},
		{"escaped key still checked", `{"serviceArguments":{"kv\u0065xact_mode":1},` + ep + `}`,
			apierror.CodeUnknownField, "serviceArguments.kvexact_mode", `did you mean "kvExactMode"`},
		{"unknown top-level", `{` + sa + `,` + ep + `,"secondaryVIP":[]}`,
			apierror.CodeUnknownField, "secondaryVIP", `did you mean "secondaryVIPs"`},
		{"no suggestion for garbage", `{` + sa + `,` + ep + `,"zzzzzzzzzzzz":1}`,
			apierror.CodeUnknownField, "zzzzzzzzzzzz", "unknown field"},
		{"string for int", `{"serviceArguments":{"port":"80"},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.port", "must be a JSON integer"},
		{"float for int", `{` + sa + `,"endpoints":[{"endpointIP":"10.1.0.1","targetPort":80.5,"weight":1}]}`,
			apierror.CodeMalformedJSON, "endpoints[0].targetPort", "integer"},
		{"overflow int", `{"serviceArguments":{"port":123456789012345678901234},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.port", "integer"},
		{"negative block", `{"serviceArguments":{"block":-1},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.block", "non-negative"},
		{"int for bool", `{"serviceArguments":{"pd_disagg_mode":1},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.pd_disagg_mode", "boolean"},
		{"number for string", `{"serviceArguments":{"externalIP":10},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.externalIP", "string"},
		{"object for endpoints", `{` + sa + `,"endpoints":{}}`,
			apierror.CodeMalformedJSON, "endpoints", "array"},
		{"endpoint not an object", `{` + sa + `,"endpoints":[1]}`,
			apierror.CodeMalformedJSON, "endpoints[0]", "object"},
		{"missing serviceArguments", `{` + ep + `}`,
			apierror.CodeInvalidField, "serviceArguments", "required"},
		{"null serviceArguments", `{"serviceArguments":null,` + ep + `}`,
			apierror.CodeInvalidField, "serviceArguments", "required"},
		{"duplicate key", `{` + sa + `,"endpoints":[{"endpointIP":"10.1.0.1","targetPort":1,"weight":1,"weight":2}]}`,
			apierror.CodeMalformedJSON, "endpoints[0].weight", "duplicate key"},
		{"duplicate serviceArguments", `{` + sa + `,` + ep + `,` + sa + `}`,
			apierror.CodeMalformedJSON, "serviceArguments", "duplicate key"},
		{"not json", `{"serviceArguments":`, apierror.CodeMalformedJSON, "", "not valid JSON"},
		{"array body", `[]`, apierror.CodeMalformedJSON, "", "JSON object"},
		{"empty body", ``, apierror.CodeMalformedJSON, "", "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeJSON([]byte(tc.body))
			ae := wantAPIError(t, err, 400, tc.code, tc.field, "")
			if !strings.Contains(ae.Message, tc.msgContain) {
				t.Errorf("message %q does not contain %q", ae.Message, tc.msgContain)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	sa := ruleSchema.fields[fieldServiceArguments].obj
	tests := []struct{ in, want string }{
		{"kv_exact_mode", "kvExactMode"},
		{"KVEXACTMODE", "kvExactMode"},
		{"pdBootstrapport", "pdBootstrapPort"},
		{"pd-cache-threshold", "pd_cache_threshold"},
		{"probeTimout", "probeTimeout"},
		{"sessionHeaderName", "session_header_name"},
		{"external_ip", "externalIP"},
		{"completely_unrelated_thing", ""},
	}
	for _, tc := range tests {
		if got := sa.suggest(tc.in); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A rule survives encode → DecodeJSON unchanged (what replay relies on).
func TestDecodeJSONRoundTrip(t *testing.T) {
	for _, r := range []Rule{plainRule(), pdRule(), pdRuleN(32)} {
		r.ServiceArguments.CHWBLPrefixHashLevel = intp(2)
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeJSON(b)
		if err != nil {
			t.Fatalf("DecodeJSON(%s): %v", b, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip changed the rule:\n got %+v\nwant %+v", got, r)
		}
	}
}

// The named wire constants must be real json tags of the model.
func TestFieldConstantsAreModelTags(t *testing.T) {
	sa := ruleSchema.fields[fieldServiceArguments].obj.fields
	ep := ruleSchema.fields[fieldEndpoints].obj.fields
	for _, f := range []string{fieldServiceArguments, fieldEndpoints, fieldSecondaryIPs, fieldAllowedSources, fieldStatus} {
		if _, ok := ruleSchema.fields[f]; !ok {
			t.Errorf("%q is not a Rule tag", f)
		}
	}
	for _, f := range []string{fieldExternalIP, fieldPrivateIP, fieldPort, fieldPortMax, fieldProtocol, fieldSel, fieldMode,
		fieldSecurity, fieldPathPrefix, fieldPathMatchMode, fieldInactiveTimeOut, fieldProbeType, fieldProbePort, fieldOper,
		fieldBGP, fieldSNAT, fieldEgress, fieldProxyProtocolV2, fieldBackendProtocol, fieldSessionHeader,
		fieldCHWBLPrefixHashLevel, fieldCHWBLPrefixHashFlags, fieldCHWBLMeanLoadFactor, fieldCHWBLReplication,
		fieldCHWBLEnableCacheSalt, fieldPDDisaggMode, fieldPDCacheAwareMode, fieldPDBootstrapPort, fieldKVExactMode,
		fieldKVEngineType, fieldKVZmqPort, fieldKVBlockSize, fieldKVHashAlgo, fieldKVDpRankCount,
		fieldTLSVersions, fieldTLSCiphers, fieldALPNProtocols, fieldHSTSMaxAge, fieldHSTSIncludeSubdomains, fieldHSTSPreload,
		fieldMTLSFrontend, fieldMTLSBackend, fieldHost} {
		if _, ok := sa[f]; !ok {
			t.Errorf("%q is not a ServiceArguments tag", f)
		}
	}
	for _, f := range []string{fieldEndpointIP, fieldTargetPort, fieldNixlPort, fieldState, fieldCounter} {
		if _, ok := ep[f]; !ok {
			t.Errorf("%q is not an Endpoint tag", f)
		}
	}
}

// decodeLikeEncodingJSON is the reference DecodeJSON must agree with.
func decodeLikeEncodingJSON(body []byte) (Rule, error) {
	var r Rule
	if err := json.Unmarshal(body, &r); err != nil {
		return Rule{}, err
	}
	r.Status = nil
	for i := range r.Endpoints {
		r.Endpoints[i].clearOutput() // every output-only key (outputOnly) is dropped
	}
	return r, nil
}

func FuzzDecodeJSON(f *testing.F) {
	for _, name := range []string{"pd_vllm.json", "get_body.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"serviceArguments":{"kv_exact_mode":1},"endpoints":[{"a":1}]}`))
	f.Add([]byte(`{"serviceArguments":{"port":"x\"\\"},"endpoints":[null,{}]}`))
	f.Add([]byte(`{"serviceArguments":{"\u00e9":1}}`))
	f.Add([]byte(`[{"a":[1,{"b":"}"}]}]`))
	f.Add([]byte(`{"serviceArguments":{"name":"caf\u00e9 \ud83d\ude00 \"q\"","port":-0,"chwbl_prefix_hash_level":null,"block":4294967295},"endpoints":[null,{"endpointIP":"\u0031.2.3.4"}],"secondaryIPs":null,"allowedSources":[]}`))
	f.Add([]byte("{\"serviceArguments\":{\"name\":\"\xff\xfe\"},\"status\":{\"ready\":true,\"reason\":\"x\"}}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeJSON(body)
		if err != nil {
			if _, ok := apierror.As(err); !ok {
				t.Fatalf("non-API error %T: %v", err, err)
			}
			return
		}
		// Differential: whatever DecodeJSON accepts, encoding/json decodes
		// to exactly the same rule.
		want, werr := decodeLikeEncodingJSON(body)
		if werr != nil {
			t.Fatalf("DecodeJSON accepted a body encoding/json rejects (%v): %q", werr, body)
		}
		if !reflect.DeepEqual(r, want) {
			t.Fatalf("DecodeJSON and encoding/json disagree on %q:\n got %+v\nwant %+v", body, r, want)
		}
		// Whatever decodes must validate/compile without panicking.
		if c, err := Compile(r); err == nil && c == nil {
			t.Fatal("Compile returned nil rule and nil error")
		}
	})
}
