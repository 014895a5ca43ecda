package pd

import (
	"net/http/httptest"
	"testing"
)

func TestWantsLogprobs(t *testing.T) {
	tests := map[string]bool{
		`{"return_logprob":true}`:             true,
		`{"logprobs":true}`:                   true,
		`{"logprobs":3}`:                      true,
		`{"logprobs":0}`:                      false,
		`{"logprobs":false,"top_logprobs":2}`: true,
		`{"logprobs":null}`:                   false,
		`{"prompt":"p"}`:                      false,
	}
	for body, want := range tests {
		o, err := parseObject([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if got := wantsLogprobs(&o); got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
}

func TestMergeInputLogprobs(t *testing.T) {
	tests := []struct {
		name, prefill, decode, want string // want "" = not merged
	}{
		{"both", `{"meta_info":{"input_token_logprobs":[[null,1,null],[-1,2,null]]}}`, `{"text":"x","meta_info":{"id":"a","input_token_logprobs":[[-2,3,null]]},"z":1}`,
			`{"text":"x","meta_info":{"id":"a","input_token_logprobs":[[null,1,null],[-1,2,null],[-2,3,null]]},"z":1}`},
		{"decode empty", `{"meta_info":{"input_token_logprobs":[[null,1,null]]}}`, `{"meta_info":{"input_token_logprobs":[ ]}}`,
			`{"meta_info":{"input_token_logprobs":[[null,1,null]]}}`},
		{"prefill without", `{"meta_info":{}}`, `{"meta_info":{"input_token_logprobs":[]}}`, ""},
		{"decode without meta", `{"meta_info":{"input_token_logprobs":[]}}`, `{"choices":[]}`, ""},
		{"prefill not JSON", `oops`, `{"meta_info":{"input_token_logprobs":[]}}`, ""},
	}
	for _, tc := range tests {
		got, ok := mergeInputLogprobs([]byte(tc.prefill), []byte(tc.decode))
		switch {
		case tc.want == "" && ok:
			t.Errorf("%s: merged %s", tc.name, got)
		case tc.want != "" && string(got) != tc.want:
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// TestLogprobEventWriter: events are rewritten whole, however the relay's
// reads split them; events without the array, with several data lines or
// a non-JSON payload pass byte for byte, and an unterminated tail is
// written at the end unchanged.
func TestLogprobEventWriter(t *testing.T) {
	const pre = `[null,1,null],[-1,2,null]`
	tests := []struct {
		name, in, want string
	}{
		{"one event",
			"data: {\"meta_info\":{\"input_token_logprobs\":[[-2,3,null]]}}\n\n",
			"data: {\"meta_info\":{\"input_token_logprobs\":[" + pre + ",[-2,3,null]]}}\n\n"},
		{"no space, CRLF, id line kept",
			"id: 7\r\ndata:{\"meta_info\":{\"input_token_logprobs\":[]}}\r\n\r\n",
			"id: 7\r\ndata:{\"meta_info\":{\"input_token_logprobs\":[" + pre + "]}}\r\n\r\n"},
		{"without the array", "data: {\"choices\":[]}\n\n", "data: {\"choices\":[]}\n\n"},
		{"done", "data: [DONE]\n\n", "data: [DONE]\n\n"},
		{"two data lines", "data: {\"meta_info\":{\"input_token_logprobs\":[]}}\ndata: {}\n\n",
			"data: {\"meta_info\":{\"input_token_logprobs\":[]}}\ndata: {}\n\n"},
		{"unterminated tail", "data: {\"meta_info\":{\"input_token_logprobs\":[]}}",
			"data: {\"meta_info\":{\"input_token_logprobs\":[]}}"},
	}
	for _, tc := range tests {
		for _, split := range []int{1, 7, len(tc.in)} {
			rec := httptest.NewRecorder()
			lw := &logprobEventWriter{ResponseWriter: rec, prefill: []byte(pre)}
			for in := []byte(tc.in); len(in) > 0; {
				n := min(split, len(in))
				if _, err := lw.Write(in[:n]); err != nil {
					t.Fatal(err)
				}
				in = in[n:]
			}
			lw.end()
			if got := rec.Body.String(); got != tc.want {
				t.Errorf("%s (reads of %d):\n got %q\nwant %q", tc.name, split, got, tc.want)
			}
		}
	}
}

func TestPrefillInputLogprobs(t *testing.T) {
	tests := map[string]string{
		`{"meta_info":{"input_token_logprobs":[[null,1,null]]}}`:                                                                                   `[null,1,null]`,
		"data: {\"meta_info\":{\"input_token_logprobs\":[]}}\n\ndata: {\"meta_info\":{\"input_token_logprobs\":[[1,2,null]]}}\n\ndata: [DONE]\n\n": `[1,2,null]`,
		"data: {\"choices\":[]}\n\n": ``,
		`oops`:                       ``,
	}
	for body, want := range tests {
		if got := string(prefillInputLogprobs([]byte(body))); got != want {
			t.Errorf("%q: %q, want %q", body, got, want)
		}
	}
}
