package pd

import (
	"bytes"
	"encoding/json"
	"testing"
)

var fuzzSeeds = []string{
	`{}`, `{ }`, `{"a":1}`, `[1]`, `null`, `{"stream":true,"stream":false}`,
	`{"model":"m","prompt":"p","max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`,
	`{"messages":[{"role":"user","content":"\u00e9\"}"}],"max_completion_tokens":3,"min_tokens":2,"n":4}`,
	"{\n \"max\\u005ftokens\" : 1.5e3 ,\"kv_transfer_params\":null}\n",
	`{"disaggregated_params":{"request_type":"x"},"bootstrap_room":-1}`,
	`{"a":[1,-0.5e-3,true,false,null,{"b":"\ud83d"}]}`, `{"a":01}`, `{"a":1.}`, `{"a":"\x"}`, "{\"a\":\"\t\"}",
	`{"a":[1,]}`, `{"a":{"b":1,}}`, `{"a":-}`, `{"a":tru}`, `{"a":1} x`, `{"a" 1}`,
}

// FuzzRewrite: every rewriter accepts any input without panicking, and for
// a valid JSON object yields valid JSON whose untouched members are
// byte-identical to the input's.
func FuzzRewrite(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, chat bool) {
		o, err := parseObject(in)
		trimmed := bytes.TrimLeft(in, " \t\r\n")
		if want := json.Valid(in) && len(trimmed) > 0 && trimmed[0] == '{'; (err == nil) != want {
			t.Fatalf("parseObject(%q) err = %v, encoding/json says valid object = %v", in, err, want)
		}
		if err != nil {
			return
		}
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		outs := map[string][]byte{
			"vllm-prefill": vllmPrefillBody(&o, path),
			"vllm-decode":  vllmDecodeBody(&o, []byte(`{"remote_engine_id":"e"}`)),
			"vllm-recomp":  vllmDecodeBody(&o, nil),
			"sglang":       sglangBody(&o, "10.0.0.1", 8998, 1<<63-1),
			"trt-context":  trtContextBody(&o, 7),
		}
		g, err := trtGenerationBody(&o, []byte(`{"ctx_request_id":1,"request_type":"context_only"}`))
		if err != nil {
			t.Fatalf("trtGenerationBody: %v", err)
		}
		outs["trt-generation"] = g
		if p, ok := o.lookup(fieldDisaggParams); ok && len(p) > 0 && p[0] == '{' {
			if _, err := trtGenerationBody(&o, p); err != nil {
				t.Fatalf("trtGenerationBody(own params): %v", err)
			}
		}
		edited := map[string]bool{
			fieldMaxTokens: true, fieldMaxCompletionTokens: true, fieldMinTokens: true, fieldStream: true,
			fieldStreamOptions: true, fieldN: true, fieldKVTransferParams: true, fieldBootstrapHost: true,
			fieldBootstrapPort: true, fieldBootstrapRoom: true, fieldDisaggParams: true,
		}
		for name, out := range outs {
			if !json.Valid(out) {
				t.Fatalf("%s: invalid JSON output %q from %q", name, out, in)
			}
			oo, err := parseObject(out)
			if err != nil {
				t.Fatalf("%s: output not an object: %v", name, err)
			}
			for i := range o.members {
				m := &o.members[i]
				if isEdited(&o, m, edited) {
					continue
				}
				key := o.raw[m.keyStart:m.keyEnd]
				want, _ := lastRaw(&o, key)
				got, ok := lastRaw(&oo, key)
				if !ok || !bytes.Equal(got, want) {
					t.Fatalf("%s: member %q changed: %q → %q", name, key, want, got)
				}
			}
		}
	})
}

func isEdited(o *object, m *member, edited map[string]bool) bool {
	for k := range edited {
		if o.keyIs(m, k) {
			return true
		}
	}
	return false
}

// lastRaw finds the last member whose raw key bytes equal key.
func lastRaw(o *object, key []byte) ([]byte, bool) {
	for i := len(o.members) - 1; i >= 0; i-- {
		m := &o.members[i]
		if bytes.Equal(o.raw[m.keyStart:m.keyEnd], key) {
			return o.raw[m.valStart:m.valEnd], true
		}
	}
	return nil, false
}

// FuzzStripClientTransferState: any input is either refused (not a JSON
// object) or comes out a valid JSON object with no top-level transfer field,
// unchanged when there was none to remove.
func FuzzStripClientTransferState(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"kv\u005ftransfer_params":1,"bootstrap_host":"h","bootstrap_host":"h2","x":{"bootstrap_room":1}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, n, err := StripClientTransferState(in)
		if err != nil || len(in) == 0 {
			return
		}
		if n == 0 && !bytes.Equal(out, in) {
			t.Fatalf("nothing removed but the body changed: %q → %q", in, out)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(out, &top); err != nil {
			t.Fatalf("output is not a JSON object: %q → %q: %v", in, out, err)
		}
		for _, k := range transferFields {
			if _, ok := top[k]; ok {
				t.Fatalf("%s survived: %q → %q", k, in, out)
			}
		}
	})
}
