package pd

import "testing"

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
