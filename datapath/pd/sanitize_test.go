package pd

import (
	"slices"
	"strings"
	"testing"
)

func TestReservedRequestID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"", false},
		{"0123456789abcdef0123456789abcdef", false},
		{"my-trace___id", false},
		{"___prefill_addr_10.0.0.1:5557___decode_addr_10.0.0.2:5558_abc", true},
		{"x___decode_addr_10.0.0.2:5558", true},
		{"___PREFILL_ADDR_10.0.0.1:1", true},
		{"cmpl-___prefill_addr_1.2.3.4:1", true},
	}
	for _, tc := range tests {
		if got := ReservedRequestID(tc.id); got != tc.want {
			t.Errorf("ReservedRequestID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

func TestStripClientTransferState(t *testing.T) {
	tests := []struct {
		name, in, want string
		n              int
		err            bool
	}{
		{"empty", ``, ``, 0, false},
		{"nothing to strip keeps bytes", `{"model":"m", "prompt":"p"}`, `{"model":"m", "prompt":"p"}`, 0, false},
		{"vllm params", `{"model":"m","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.9.9.9"}}`, `{"model":"m"}`, 1, false},
		{"sglang triple", `{"bootstrap_host":"10.9.9.9","model":"m","bootstrap_port":1,"bootstrap_room":7}`, `{"model":"m"}`, 3, false},
		{"trt params", `{"model":"m","disaggregated_params":{"request_type":"generation_only","ctx_request_id":1}}`, `{"model":"m"}`, 1, false},
		{"duplicates all go", `{"kv_transfer_params":1,"model":"m","kv_transfer_params":{"x":1}}`, `{"model":"m"}`, 2, false},
		{"escaped key spelling", `{"model":"m","kv\u005ftransfer_params":{"x":1}}`, `{"model":"m"}`, 1, false},
		{"nested is not top level", `{"model":"m","extra":{"kv_transfer_params":1}}`, `{"model":"m","extra":{"kv_transfer_params":1}}`, 0, false},
		{"not JSON", `{"model":"m","kv_transfer_params":NaN}`, ``, 0, true},
		{"not an object", `["kv_transfer_params"]`, ``, 0, true},
		{"body request_id with markers", `{"model":"m","request_id":"___decode_addr_6.6.6.6:1"}`, ``, 0, true},
		{"plain body request_id kept", `{"model":"m","request_id":"trace-1"}`, `{"model":"m","request_id":"trace-1"}`, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, n, err := StripClientTransferState([]byte(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if string(got) != tc.want || n != tc.n {
				t.Errorf("got %s (%d removed), want %s (%d)", got, n, tc.want, tc.n)
			}
		})
	}
}

// TestDialectBodiesCarryNoClientTransferState: every leg body each dialect
// builds has only the gateway's own transfer state, whatever the client sent.
func TestDialectBodiesCarryNoClientTransferState(t *testing.T) {
	client := `{"model":"m","prompt":"p","max_tokens":4,"stream":true,` +
		`"kv_transfer_params":{"remote_host":"6.6.6.6"},"bootstrap_host":"6.6.6.6","bootstrap_port":6666,` +
		`"bootstrap_room":6,"disaggregated_params":{"ctx_request_id":666}}`
	legs := map[string]func(o *object) []byte{
		"vllm prefill":           func(o *object) []byte { return vllmPrefillBody(o, "/v1/completions") },
		"vllm responses prefill": func(o *object) []byte { return vllmPrefillBody(o, "/v1/responses") },
		"vllm decode":            func(o *object) []byte { return vllmDecodeBody(o, []byte(`{"remote_host":"10.0.0.1"}`)) },
		"vllm decode recompute":  func(o *object) []byte { return vllmDecodeBody(o, nil) },
		"sglang":                 func(o *object) []byte { return sglangBody(o, "10.0.0.1", 8998, 1) },
		"trt context":            func(o *object) []byte { return trtContextBody(o, 1) },
		"trt generation": func(o *object) []byte {
			b, _ := trtGenerationBody(o, []byte(`{"ctx_request_id":1}`))
			return b
		},
		"trt standalone": func(o *object) []byte {
			b, _ := trtGenerationBody(o, nil)
			return b
		},
	}
	for name, build := range legs {
		t.Run(name, func(t *testing.T) {
			o, err := parseObject([]byte(client))
			if err != nil {
				t.Fatal(err)
			}
			got := string(build(&o))
			if strings.Contains(got, "6.6.6.6") || strings.Contains(got, "666") || strings.Contains(got, `"bootstrap_room":6`) {
				t.Errorf("client transfer state reached the leg: %s", got)
			}
		})
	}
}

func TestShouldRetryDecode(t *testing.T) {
	tests := []struct {
		name    string
		l       LegResult
		haveAlt bool
		want    bool
	}{
		{"connect failure, alternate left", LegResult{NotSent: true}, true, true},
		{"connect failure, no alternate", LegResult{NotSent: true}, false, false},
		{"died after sending", LegResult{Died: true}, true, false},
		{"timed out", LegResult{NotSent: true, TimedOut: true}, true, false},
		{"cancelled", LegResult{NotSent: true, Cancelled: true}, true, false},
		{"engine answered 503", LegResult{Status: 503}, true, false},
	}
	for _, tc := range tests {
		if got := shouldRetryDecode(tc.l, tc.haveAlt); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestTransferFieldsUnion: the fields stripped on every P/D path are every
// registered engine's, whatever the rule's engine.
func TestTransferFieldsUnion(t *testing.T) {
	want := []string{"kv_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room", "disaggregated_params"}
	got := slices.Clone(transferFields)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("transferFields = %q, want %q", got, want)
	}
}
