package pd

import (
	"bytes"
	"strings"
	"testing"
)

// TestApplyOwnIntoMatchesApplyOwn checks that writing a leg body into a
// reused buffer gives exactly the bytes of a fresh one, over the JSON edge
// cases the rewrite handles (duplicate and escaped keys, nested objects,
// whitespace, an empty object), whether the buffer is big enough, too
// small, or dirty with a previous, longer body; and that a big enough
// buffer is really reused.
func TestApplyOwnIntoMatchesApplyOwn(t *testing.T) {
	params := []byte(`{"do_remote_prefill":true,"remote_engine_id":"e1","remote_block_ids":[[1,2]]}`)
	bodies := []struct{ name, in string }{
		{"plain", `{"model":"m","prompt":"p","max_tokens":64,"stream":true}`},
		{"duplicate keys", `{"kv_transfer_params":{"a":1},"prompt":"p","kv_transfer_params":{"b":2},"stream":true}`},
		{"escaped key", `{"kv\u005ftransfer_params":{"x":1},"prompt":"p"}`},
		{"nested transfer-like keys stay", `{"prompt":"p","meta":{"kv_transfer_params":{"x":1},"bootstrap_room":3}}`},
		{"other engines' transfer fields dropped", `{"prompt":"p","bootstrap_host":"h","disaggregated_params":{}}`},
		{"whitespace", "{\n \"prompt\" : \"p\" ,\n \"kv_transfer_params\" : null\n}\n"},
		{"empty object", `{ }`},
	}
	for _, b := range bodies {
		for _, p := range [][]byte{params, nil} {
			o, err := parseObject([]byte(b.in))
			if err != nil {
				t.Fatalf("%s: parseObject: %v", b.name, err)
			}
			want := vllmDecodeBody(&o, p)
			for _, buf := range []struct {
				name  string
				buf   []byte
				reuse bool
			}{
				{"nil", nil, false},
				{"too small", make([]byte, 0, len(want)-1), false},
				// The size pass may count one separator too many.
				{"room", make([]byte, 0, len(want)+1), true},
				{"dirty and larger", []byte(strings.Repeat("#", 2*len(want)+64)), true},
			} {
				got := vllmDecodeBodyInto(buf.buf, &o, p)
				if !bytes.Equal(got, want) {
					t.Errorf("%s/%s (params %v): got %s, want %s", b.name, buf.name, p != nil, got, want)
				}
				if reused := cap(buf.buf) > 0 && &got[:1][0] == &buf.buf[:1][0]; reused != buf.reuse {
					t.Errorf("%s/%s: buffer reused = %v, want %v", b.name, buf.name, reused, buf.reuse)
				}
			}
		}
	}
}

// TestDecodeRoomFitsDecodeBody checks the NIXL prefill body's capacity
// leaves the decode body, with params the size a real prefill returns for
// such a prompt, room to reuse it.
func TestDecodeRoomFitsDecodeBody(t *testing.T) {
	for _, words := range []int{1, 100, 100_000} {
		in := `{"model":"m","prompt":"` + strings.Repeat("word ", words) + `","max_tokens":8}`
		o, err := parseObject([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		// One block id per 16 tokens of about a word each, six bytes an id.
		ids := strings.TrimSuffix(strings.Repeat("12345,", max(words/16, 1)), ",")
		params := []byte(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[` + ids +
			`]],"remote_engine_id":"0f6e8a6c-4f1b-4a5e-9d3e-1c2b3a4d5e6f","remote_host":"10.0.0.7","remote_port":5600,"remote_request_id":"0123456789abcdef0123456789abcdef","tp_size":8}`)
		pre := vllmPrefillBodyInto(make([]byte, 0, decodeRoom(len(in))), &o, "/v1/completions", vllmPrefillParams)
		dec := vllmDecodeBodyInto(pre, &o, params)
		if &dec[0] != &pre[:1][0] {
			t.Errorf("%d words: decode body (%d bytes) did not fit the prefill buffer (cap %d)", words, len(dec), cap(pre))
		}
		if want := vllmDecodeBody(&o, params); !bytes.Equal(dec, want) {
			t.Errorf("%d words: decode body differs from a fresh one", words)
		}
	}
}
