package pd_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

var engines = []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM}

const (
	pathCompletions = "/v1/completions"
	pathChat        = "/v1/chat/completions"
)

// clientBody is the client's request: an escaped unicode prompt, odd number
// spellings and key order that every leg must keep byte for byte.
func clientBody(path string, stream bool) string {
	s := strconv.FormatBool(stream)
	opts := ""
	if stream {
		opts = `,"stream_options":{"include_usage":true}`
	}
	if path == pathChat {
		return `{"model":"m","messages":[{"role":"user","content":"hi \ud83d\ude00 \u00e9"}],"temperature":0.70,"max_completion_tokens":16,"stream":` + s + opts + `,"seed":1E2}`
	}
	return `{"model":"m","prompt":"Say caf\u00e9","temperature":0.70,"max_tokens":16,"stream":` + s + opts + `,"seed":1E2}`
}

// withoutClose is body minus its final brace, the prefix every appended key follows.
func withoutClose(b string) string { return b[:len(b)-1] }

func TestDialectsHappyPath(t *testing.T) {
	for _, engine := range engines {
		for _, path := range []string{pathCompletions, pathChat} {
			for _, stream := range []bool{false, true} {
				name := fmt.Sprintf("%s%s/stream=%v", engine, path, stream)
				t.Run(name, func(t *testing.T) {
					f := startFleet(t, engine)
					d := mustDialect(t, engine)
					body := clientBody(path, stream)
					pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}
					res := f.do(t, d, path, body, pair, 0)
					if res.status != 200 || res.readErr != nil {
						t.Fatalf("client got %d (%v): %s", res.status, res.readErr, res.body)
					}
					if res.out.Code != "" || res.out.Status != 200 {
						t.Errorf("outcome = %d %q, want 200 success", res.out.Status, res.out.Code)
					}
					checkClientBody(t, res, stream)
					p := waitLegs(t, f.prefill, 1)[0]
					dl := waitLegs(t, f.dec, 1)[0]
					for _, r := range []pdfake.Record{p, dl} {
						if r.Violation != "" {
							t.Errorf("engine reported violation: %s", r.Violation)
						}
						if r.Path != path || r.Method != "POST" {
							t.Errorf("leg got %s %s, want POST %s", r.Method, r.Path, path)
						}
						if ct := r.Header.Get("Content-Type"); ct != "application/json" {
							t.Errorf("leg Content-Type = %q", ct)
						}
					}
					switch engine {
					case spec.EngineVLLM:
						checkVLLMLegs(t, f, path, body, p, dl)
					case spec.EngineSGLang:
						checkSGLangLegs(t, f, body, p, dl)
					case spec.EngineTRTLLM:
						checkTRTLegs(t, body, stream, p, dl)
					}
				})
			}
		}
	}
}

func checkClientBody(t *testing.T, res result, stream bool) {
	t.Helper()
	if stream {
		if ct := res.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Errorf("stream Content-Type = %q", ct)
		}
		if n := strings.Count(res.body, "data: "); n < 6 {
			t.Errorf("stream has %d events, want ≥ 6: %s", n, res.body)
		}
		if !strings.HasSuffix(res.body, "data: [DONE]\n\n") || strings.Count(res.body, "[DONE]") != 1 {
			t.Errorf("stream does not end with exactly one [DONE]: %q", res.body)
		}
		return
	}
	var v struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if err := json.Unmarshal([]byte(res.body), &v); err != nil || len(v.Choices) != 1 {
		t.Errorf("non-stream body is not a completion (%v): %s", err, res.body)
	}
	if !strings.Contains(res.body, "42") {
		t.Errorf("client body is not the decode's answer: %s", res.body)
	}
}

var receipt = regexp.MustCompile(`^___prefill_addr_127\.0\.0\.2:19001___decode_addr_127\.0\.0\.4:19003_0123456789abcdef0123456789abcdef$`)

func checkVLLMLegs(t *testing.T, f *fleet, path, body string, p, d pdfake.Record) {
	t.Helper()
	for _, r := range []pdfake.Record{p, d} {
		if id := r.Header.Get("X-Request-Id"); !receipt.MatchString(id) {
			t.Errorf("X-Request-Id = %q, want NIXL receipt", id)
		}
	}
	var want string
	cap := `"max_tokens":1`
	if path == pathChat {
		cap = `"max_completion_tokens":1`
	}
	want = strings.NewReplacer(`"max_tokens":16`, cap, `"max_completion_tokens":16`, cap,
		`"stream":true`, `"stream":false`, `,"stream_options":{"include_usage":true}`, "").Replace(body)
	want = withoutClose(want) + `,"n":1,"ignore_eos":true,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`
	if string(p.Body) != want {
		t.Errorf("prefill body\n got: %s\nwant: %s", p.Body, want)
	}
	prefix := withoutClose(body) + `,"kv_transfer_params":{`
	if !strings.HasPrefix(string(d.Body), prefix) {
		t.Fatalf("decode body is not the client body plus params\n got: %s\nwant prefix: %s", d.Body, prefix)
	}
	var kv struct {
		Params struct {
			DoRemotePrefill bool   `json:"do_remote_prefill"`
			EngineID        string `json:"remote_engine_id"`
			Port            int    `json:"remote_port"`
			Host            string `json:"remote_host"`
			RequestID       string `json:"remote_request_id"`
		} `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(d.Body, &kv); err != nil {
		t.Fatal(err)
	}
	if !kv.Params.DoRemotePrefill || kv.Params.Port != 19001 || kv.Params.Host != "127.0.0.2" ||
		!strings.HasPrefix(kv.Params.EngineID, "prefill-engine-127.0.0.2") || !receipt.MatchString(kv.Params.RequestID) {
		t.Errorf("decode kv_transfer_params not the prefill's: %+v", kv.Params)
	}
}

var bootstrapSuffix = regexp.MustCompile(`^,"bootstrap_host":"127\.0\.0\.2","bootstrap_port":(\d+),"bootstrap_room":(\d+)}$`)

func checkSGLangLegs(t *testing.T, f *fleet, body string, p, d pdfake.Record) {
	t.Helper()
	if string(p.Body) != string(d.Body) {
		t.Errorf("legs differ\nprefill: %s\n decode: %s", p.Body, d.Body)
	}
	prefix := withoutClose(body)
	if !strings.HasPrefix(string(p.Body), prefix) {
		t.Fatalf("prefill body does not keep the client body: %s", p.Body)
	}
	m := bootstrapSuffix.FindStringSubmatch(string(p.Body[len(prefix):]))
	if m == nil {
		t.Fatalf("bootstrap triple missing or malformed: %s", p.Body[len(prefix):])
	}
	if m[1] != strconv.Itoa(int(f.prefill.BootstrapPort())) {
		t.Errorf("bootstrap_port = %s, want %d", m[1], f.prefill.BootstrapPort())
	}
	if room, err := strconv.ParseUint(m[2], 10, 64); err != nil || room > 1<<63-1 {
		t.Errorf("bootstrap_room %s out of range", m[2])
	}
	for _, r := range []pdfake.Record{p, d} {
		if id := r.Header.Get("X-Request-Id"); id != "0123456789abcdef0123456789abcdef" {
			t.Errorf("X-Request-Id = %q, want the request's id", id)
		}
	}
}

var disaggContext = regexp.MustCompile(`^,"disaggregated_params":\{"request_type":"context_only","disagg_request_id":\d+\}\}$`)

func checkTRTLegs(t *testing.T, body string, stream bool, p, d pdfake.Record) {
	t.Helper()
	ctx := strings.NewReplacer(`"stream":true`, `"stream":false`, `,"stream_options":{"include_usage":true}`, "").Replace(body)
	prefix := withoutClose(ctx)
	if !strings.HasPrefix(string(p.Body), prefix) || !disaggContext.MatchString(string(p.Body[len(prefix):])) {
		t.Errorf("context body\n got: %s\nwant: %s + context_only params", p.Body, prefix)
	}
	gprefix := withoutClose(body) + `,"disaggregated_params":{`
	if !strings.HasPrefix(string(d.Body), gprefix) {
		t.Fatalf("generation body is not the client body plus params\n got: %s", d.Body)
	}
	var g struct {
		DP map[string]json.RawMessage `json:"disaggregated_params"`
	}
	if err := json.Unmarshal(d.Body, &g); err != nil {
		t.Fatal(err)
	}
	if string(g.DP["request_type"]) != `"generation_only"` || g.DP["ctx_request_id"] == nil ||
		!strings.HasPrefix(string(g.DP["encoded_opaque_state"]), `"MOCKTRT1:`) || string(g.DP["first_gen_tokens"]) != "[12345]" {
		t.Errorf("generation disaggregated_params not the context's: %s", d.Body[len(withoutClose(body)):])
	}
}
