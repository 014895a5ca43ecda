package pd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

const kvReq = `"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}`

func TestVLLMPrefillBody(t *testing.T) {
	tests := []struct {
		name, path, in, want string
	}{
		{"completions caps and strips", "/v1/completions",
			`{"model":"m","prompt":"hi","max_tokens":50,"min_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`,
			`{"model":"m","prompt":"hi","max_tokens":1,"stream":false,"n":1,"ignore_eos":true,` + kvReq + `}`},
		{"cap added when absent", "/v1/completions",
			`{"prompt":"x"}`,
			`{"prompt":"x","max_tokens":1,"stream":false,"n":1,"ignore_eos":true,` + kvReq + `}`},
		{"chat max_completion_tokens", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"a"}],"max_completion_tokens":7,"n":3}`,
			`{"messages":[{"role":"user","content":"a"}],"max_completion_tokens":1,"n":1,"stream":false,"ignore_eos":true,` + kvReq + `}`},
		{"chat with both caps", "/v1/chat/completions",
			`{"max_tokens":9,"max_completion_tokens":7}`,
			`{"max_tokens":1,"max_completion_tokens":1,"stream":false,"n":1,"ignore_eos":true,` + kvReq + `}`},
		{"client kv params replaced in place", "/v1/completions",
			`{"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"evil"},"prompt":"p"}`,
			`{"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false},"prompt":"p","max_tokens":1,"stream":false,"n":1,"ignore_eos":true}`},
		{"duplicate keys collapse", "/v1/completions",
			`{"stream":true,"prompt":"p","stream":true,"max_tokens":3}`,
			`{"stream":false,"prompt":"p","max_tokens":1,"n":1,"ignore_eos":true,` + kvReq + `}`},
		{"keys inside strings are not keys", "/v1/completions",
			`{"prompt":"\"stream\":true,\"max_tokens\":9","max_tokens":2}`,
			`{"prompt":"\"stream\":true,\"max_tokens\":9","max_tokens":1,"stream":false,"n":1,"ignore_eos":true,` + kvReq + `}`},
		{"escaped key spelling", "/v1/completions",
			`{"max\u005ftokens":9,"prompt":"p"}`,
			`{"max\u005ftokens":1,"prompt":"p","stream":false,"n":1,"ignore_eos":true,` + kvReq + `}`},
		{"whitespace, numbers and escapes survive", "/v1/completions",
			"{\n  \"temperature\" : 1.50E+0 ,\n  \"prompt\": \"caf\\u00e9 \\ud83d\\ude00\",\n  \"stream_options\" : { \"x\" : [1,2] } ,\n  \"seed\":-0\n}\n",
			"{\n  \"temperature\" : 1.50E+0 ,\n  \"prompt\": \"caf\\u00e9 \\ud83d\\ude00\",\n  \"seed\":-0\n,\"max_tokens\":1,\"stream\":false,\"n\":1,\"ignore_eos\":true," + kvReq + "}\n"},
		{"empty object", "/v1/completions", `{ }`,
			`{ "max_tokens":1,"stream":false,"n":1,"ignore_eos":true,` + kvReq + `}`},
		{"only deleted keys", "/v1/completions", `{"min_tokens":1}`,
			`{"max_tokens":1,"stream":false,"n":1,"ignore_eos":true,` + kvReq + `}`},
		// The one token must finish by the cap (the connector hands off only
		// a length-capped finish): no EOS, no stop conditions.
		{"stop conditions dropped, eos ignored", "/v1/completions",
			`{"prompt":"p","stop":["\n"],"stop_token_ids":[2,7],"include_stop_str_in_output":true,"ignore_eos":false,"max_tokens":8}`,
			`{"prompt":"p","ignore_eos":true,"max_tokens":1,"stream":false,"n":1,` + kvReq + `}`},
		{"chat stop string dropped", "/v1/chat/completions",
			`{"messages":[],"stop":"END","max_completion_tokens":4}`,
			`{"messages":[],"max_completion_tokens":1,"stream":false,"n":1,"ignore_eos":true,` + kvReq + `}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseObject([]byte(tc.in))
			if err != nil {
				t.Fatalf("parseObject: %v", err)
			}
			got := string(vllmPrefillBody(&o, tc.path))
			if got != tc.want {
				t.Errorf("vllmPrefillBody\n got: %s\nwant: %s", got, tc.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("output is not valid JSON: %s", got)
			}
		})
	}
}

func TestParseObjectRejects(t *testing.T) {
	for _, in := range []string{``, `[1]`, `"x"`, `{`, `{"a":1,}`, `{"a":1}{}`, `null`, `1`} {
		if _, err := parseObject([]byte(in)); err == nil {
			t.Errorf("parseObject(%q) accepted a non-object", in)
		}
	}
}

func TestDecodeAndSGLangAndTRTBodies(t *testing.T) {
	orig := `{"model":"m","prompt":"p","max_tokens":64,"stream":true,"kv_transfer_params":{"x":1}}`
	params := `{"do_remote_prefill":true,"remote_engine_id":"e1","remote_block_ids":[[1,2]],"remote_port":9001}`
	tests := []struct {
		name string
		f    func(o *object) ([]byte, error)
		want string
	}{
		{"vllm decode with params", func(o *object) ([]byte, error) { return vllmDecodeBody(o, []byte(params)), nil },
			`{"model":"m","prompt":"p","max_tokens":64,"stream":true,"kv_transfer_params":` + params + `}`},
		{"vllm decode recompute strips client params", func(o *object) ([]byte, error) { return vllmDecodeBody(o, nil), nil },
			`{"model":"m","prompt":"p","max_tokens":64,"stream":true}`},
		{"sglang triple strips the other engines' transfer fields", func(o *object) ([]byte, error) { return sglangBody(o, "10.0.0.7", 8998, 1<<63-1), nil },
			`{"model":"m","prompt":"p","max_tokens":64,"stream":true,"bootstrap_host":"10.0.0.7","bootstrap_port":8998,"bootstrap_room":9223372036854775807}`},
		{"trt context", func(o *object) ([]byte, error) { return trtContextBody(o, 42), nil },
			`{"model":"m","prompt":"p","max_tokens":64,"stream":false,"disaggregated_params":{"request_type":"context_only","disagg_request_id":42}}`},
		{"trt generation", func(o *object) ([]byte, error) {
			return trtGenerationBody(o, []byte(`{"request_type":"context_only","first_gen_tokens":[12345],"ctx_request_id":7,"encoded_opaque_state":"A+/=","draft_tokens":null}`))
		}, `{"model":"m","prompt":"p","max_tokens":64,"stream":true,"disaggregated_params":{"request_type":"generation_only","first_gen_tokens":[12345],"ctx_request_id":7,"encoded_opaque_state":"A+/=","draft_tokens":null}}`},
		{"trt generation without request_type", func(o *object) ([]byte, error) {
			return trtGenerationBody(o, []byte(`{"ctx_request_id":7}`))
		}, `{"model":"m","prompt":"p","max_tokens":64,"stream":true,"disaggregated_params":{"ctx_request_id":7,"request_type":"generation_only"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseObject([]byte(orig))
			if err != nil {
				t.Fatal(err)
			}
			got, err := tc.f(&o)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

func TestIsEarlyExit(t *testing.T) {
	tests := []struct {
		raw  string
		want bool
	}{
		{`"stop"`, true}, {`"length"`, false}, {`"not_finished"`, false}, {`null`, false},
		{``, false}, {`1`, false}, {`"st\u006fp"`, true}, {`"abort"`, true}, {`"`, false},
	}
	for _, tc := range tests {
		if got := isEarlyExit(json.RawMessage(tc.raw)); got != tc.want {
			t.Errorf("isEarlyExit(%s) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}

func TestShouldRetryPrefill(t *testing.T) {
	tests := []struct {
		name string
		l    LegResult
		want bool
	}{
		{"200", LegResult{Status: 200}, false},
		{"400", LegResult{Status: 400}, false},
		{"500", LegResult{Status: 500}, true},
		{"503", LegResult{Status: 503}, true},
		{"transport", LegResult{Err: errTest, Died: true}, true},
		{"not sent", LegResult{Err: errTest, NotSent: true}, true},
		{"timeout", LegResult{Err: errTest, TimedOut: true}, false},
		{"cancelled", LegResult{Err: errTest, Cancelled: true}, false},
	}
	for _, tc := range tests {
		if got := shouldRetryPrefill(tc.l); got != tc.want {
			t.Errorf("%s: shouldRetryPrefill = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestShouldRetrySGPair(t *testing.T) {
	tests := []struct {
		name                string
		p                   sgPrefill
		decodeBytes, budget bool
		want                bool
	}{
		{"died, no decode bytes", sgPrefill{err: errTest}, false, true, true},
		{"died, budget spent", sgPrefill{err: errTest}, false, false, false},
		{"died after decode bytes", sgPrefill{err: errTest}, true, true, false},
		{"500 is an answer", sgPrefill{status: 500}, false, true, false},
		{"400 is an answer", sgPrefill{status: 400}, false, true, false},
	}
	for _, tc := range tests {
		if got := shouldRetrySGPair(tc.p, tc.decodeBytes, tc.budget); got != tc.want {
			t.Errorf("%s: shouldRetrySGPair = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestContainsDone(t *testing.T) {
	tests := []struct {
		prev, cur string
		want      bool
	}{
		{"", "data: [DONE]\n\n", true},
		{"", "data:[DONE]\n\n", true},
		{"data: [DO", "NE]\n\n", true},
		{"data: [", "DONE]", true},
		{"data", ": [DONE]", true},
		{"data: {}", "\n\n", false},
		{"", `data: {"text":"[DONE]"}`, false},
		{"", "", false},
	}
	for _, tc := range tests {
		if got := containsDone([]byte(tc.prev), []byte(tc.cur)); got != tc.want {
			t.Errorf("containsDone(%q,%q) = %v", tc.prev, tc.cur, got)
		}
	}
}

// TestRelayDetectsSplitDone feeds a [DONE] split over one-byte reads: the
// idle end must not add a second one.
func TestRelayDetectsSplitDone(t *testing.T) {
	for _, stream := range []string{"data: {}\n\ndata: [DONE]\n\n", "data: {}\n\n"} {
		pr, pw := io.Pipe()
		go func() {
			for i := 0; i < len(stream); i++ {
				_, _ = pw.Write([]byte{stream[i]})
			}
			// Then silence until the relay gives up.
		}()
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: pr}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-ctx.Done(); pw.CloseWithError(ctx.Err()) }()
		w := httptest.NewRecorder()
		buf := make([]byte, 64)
		log := logrus.New()
		log.SetOutput(io.Discard)
		q := &seq{ctx: context.Background(), w: w, opts: Options{StreamIdleTimeout: 50 * time.Millisecond, BodyIdleTimeout: time.Hour}, log: log}
		res := q.relay(peek{resp: resp}, buf, cancel)
		cancel()
		if !res.idle {
			t.Errorf("relay did not end on idle: %+v", res)
		}
		if n := strings.Count(w.Body.String(), "[DONE]"); n != 1 {
			t.Errorf("stream %q relayed with %d [DONE]: %q", stream, n, w.Body.String())
		}
	}
}

func TestVLLMRequestID(t *testing.T) {
	id := vllmRequestID(ep("10.0.0.1:8000", 9001), ep("10.0.0.2:8000", 0), "0123456789abcdef0123456789abcdef")
	want := "___prefill_addr_10.0.0.1:9001___decode_addr_10.0.0.2:8000_0123456789abcdef0123456789abcdef"
	if id != want {
		t.Errorf("vllmRequestID = %s, want %s", id, want)
	}
	if s := idSuffix("not-hex"); !isHex32(s) {
		t.Errorf("idSuffix generated %q, want 32 lowercase hex", s)
	}
	if !strings.HasPrefix(idSuffix("0123456789abcdef0123456789abcdef"), "0123") {
		t.Error("idSuffix did not reuse a 32-hex request id")
	}
}

func TestIsChat(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/chat/completions": true, "/v1/chat/completions?x=1": true, "/v1/completions": false,
		"/v1/completions?p=/chat/completions": false, "": false,
	} {
		if got := isChat(path); got != want {
			t.Errorf("isChat(%q) = %v, want %v", path, got, want)
		}
	}
}
