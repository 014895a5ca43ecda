package datapath

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

var pdEngines = []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM}

// sideCounts is how many side-path requests each prefill and decode got.
func (f *pdFleet) sideCounts() (pre, dec []int) {
	for _, e := range f.prefills {
		pre = append(pre, len(e.SideRequests()))
	}
	for _, e := range f.decodes {
		dec = append(dec, len(e.SideRequests()))
	}
	return pre, dec
}

func sum(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}

// TestPDSidePaths: everything that generates nothing lands on exactly one
// endpoint, a prefill, with no P/D sequence (no inference leg anywhere),
// and the engine's answer comes back as it was.
func TestPDSidePaths(t *testing.T) {
	side := []struct {
		method, path, body, want string
	}{
		{"POST", "/tokenize", `{"model":"fake-model","prompt":"hello"}`, `"tokens"`},
		{"POST", "/detokenize", `{"model":"fake-model","tokens":[1,2]}`, `"prompt"`},
		{"POST", "/v1/embeddings", `{"model":"fake-model","input":"hello"}`, `"embedding"`},
		{"POST", "/v1/messages/count_tokens", `{"model":"fake-model","messages":[{"role":"user","content":"hi"}]}`, `"input_tokens"`},
		{"GET", "/v1/models", "", `"object":"list"`},
		{"GET", "/health", "", `"status":"ok"`},
		{"GET", "/version", "", pdfake.Version},
	}
	for _, engine := range pdEngines {
		t.Run(string(engine), func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), engine, 2, 2)
			c := testClient()
			for _, s := range side {
				prePre, preDec := f.sideCounts()
				var body io.Reader
				if s.body != "" {
					body = strings.NewReader(s.body)
				}
				req, _ := http.NewRequest(s.method, f.url(s.path), body)
				if s.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				res := do(t, c, req)
				if res.status != 200 || !strings.Contains(res.body, s.want) || res.header.Get(HeaderError) != "" {
					t.Fatalf("%s %s: %d %v %s", s.method, s.path, res.status, res.header, res.body)
				}
				pre, dec := f.sideCounts()
				if got := sum(pre) - sum(prePre); got != 1 {
					t.Errorf("%s %s: prefills got %d side requests, want exactly 1", s.method, s.path, got)
				}
				if got := sum(dec) - sum(preDec); got != 0 {
					t.Errorf("%s %s: decodes got %d side requests, want 0", s.method, s.path, got)
				}
				for _, e := range f.prefills {
					recs := e.SideRequests()
					if len(recs) > 0 && recs[len(recs)-1].Path == s.path && string(recs[len(recs)-1].Body) != s.body {
						t.Errorf("%s: body %q, want %q byte for byte", s.path, recs[len(recs)-1].Body, s.body)
					}
				}
			}
			if p, d := f.legCounts(); sum(p)+sum(d) != 0 {
				t.Errorf("side paths started inference legs: prefill %v decode %v", p, d)
			}
			waitCounter(t, f.reg, "infergate_pd_unsplit_requests_total", map[string]string{"reason": "side_path"}, float64(len(side)))
		})
	}
}

// TestPDResponses: /v1/responses runs through the vLLM and SGLang P/D
// sequences (vLLM's prefill capped by max_output_tokens) with the
// Responses API's named events relayed as they come, never a [DONE];
// TensorRT-LLM's disaggregated server has no Responses API, so its
// generation server answers standalone (counted).
func TestPDResponses(t *testing.T) {
	for _, engine := range pdEngines {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", engine, stream), func(t *testing.T) {
				f := newPDFleet(t, pdTestOptions(), engine, 1, 1)
				body := fmt.Sprintf(`{"model":"fake-model","input":"hello there","max_output_tokens":16,"stream":%v}`, stream)
				res := post(t, testClient(), f.url(pathResponses), body)
				if res.status != 200 {
					t.Fatalf("%d %s", res.status, res.body)
				}
				if stream {
					for _, ev := range []string{"event: response.created", "event: response.output_text.delta", "event: response.completed"} {
						if !strings.Contains(res.body, ev) {
							t.Fatalf("stream lacks %q: %s", ev, res.body)
						}
					}
					if strings.Contains(res.body, "[DONE]") {
						t.Fatalf("a Responses stream got a chat-style [DONE]: %s", res.body)
					}
				} else if !strings.Contains(res.body, `"object":"response"`) {
					t.Fatalf("answer %s", res.body)
				}
				pre, dec := f.prefills[0].Records(), f.decodes[0].Records()
				if engine == spec.EngineTRTLLM {
					if len(pre) != 0 || len(dec) != 1 || bytes.Contains(dec[0].Body, []byte("disaggregated_params")) {
						t.Fatalf("TRT-LLM responses: prefill %d decode %d legs", len(pre), len(dec))
					}
					waitCounter(t, f.reg, "infergate_pd_unsplit_requests_total", map[string]string{"path": pathResponses, "reason": "no_transfer_api"}, 1)
					return
				}
				if len(pre) != 1 || len(dec) != 1 {
					t.Fatalf("legs: prefill %d decode %d, want 1 and 1", len(pre), len(dec))
				}
				pm, dm := legMarkers(engine)
				for _, rec := range append(pre, dec...) {
					if rec.Violation != "" || rec.Path != pathResponses {
						t.Fatalf("leg %s: violation %q", rec.Path, rec.Violation)
					}
				}
				if !bytes.Contains(pre[0].Body, []byte(pm)) || !bytes.Contains(dec[0].Body, []byte(dm)) {
					t.Fatalf("transfer fields missing: prefill %s decode %s", pre[0].Body, dec[0].Body)
				}
				if engine == spec.EngineVLLM {
					var p map[string]json.RawMessage
					_ = json.Unmarshal(pre[0].Body, &p)
					if string(p["max_output_tokens"]) != "1" || string(p["stream"]) != "false" || string(p["store"]) != "false" {
						t.Fatalf("vLLM responses prefill body %s", pre[0].Body)
					}
					if _, ok := p["max_tokens"]; ok {
						t.Fatalf("responses prefill got a max_tokens the API does not have: %s", pre[0].Body)
					}
					if !bytes.Contains(dec[0].Body, []byte(`"max_output_tokens":16`)) {
						t.Fatalf("decode lost the client's cap: %s", dec[0].Body)
					}
				}
			})
		}
	}
}

// TestPDMessages: /v1/messages carries no transfer fields. vLLM and
// TRT-LLM send it to one decode, which computes the prompt (counted);
// SGLang decodes cannot serve it without a prefill room, so without a
// role-0 endpoint it is refused with a code.
func TestPDMessages(t *testing.T) {
	body := `{"model":"fake-model","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	for _, engine := range pdEngines {
		t.Run(string(engine), func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), engine, 1, 1)
			res := post(t, testClient(), f.url(pathMessages), body, "anthropic-version", "2023-06-01")
			pre, dec := f.legCounts()
			if engine == spec.EngineSGLang {
				if res.status != http.StatusNotImplemented || errorCode(t, res.body) != CodePDPathRefused {
					t.Fatalf("%d %s", res.status, res.body)
				}
				if sum(pre)+sum(dec) != 0 {
					t.Fatalf("a refused request reached engines: %v %v", pre, dec)
				}
				return
			}
			if res.status != 200 || !strings.Contains(res.body, `"type":"message"`) {
				t.Fatalf("%d %s", res.status, res.body)
			}
			if sum(pre) != 0 || sum(dec) != 1 {
				t.Fatalf("legs: prefill %v decode %v, want one decode only", pre, dec)
			}
			rec := f.decodes[0].Records()[0]
			if string(rec.Body) != body || rec.Header.Get("Anthropic-Version") != "2023-06-01" {
				t.Fatalf("decode got %q %v", rec.Body, rec.Header)
			}
			waitCounter(t, f.reg, "infergate_pd_unsplit_requests_total", map[string]string{"path": pathMessages, "reason": "no_transfer_api"}, 1)
		})
	}
}

// TestPDMultiSample: n > 1 per engine. vLLM skips the prefill (its transfer
// is single-consumer) and the decode computes all n choices, streaming
// included; SGLang fans out one single-sample dispatch (own bootstrap room)
// per choice and merges them in order; TRT-LLM refuses with a code instead
// of answering with fewer choices.
func TestPDMultiSample(t *testing.T) {
	for _, engine := range pdEngines {
		for _, stream := range []bool{false, true} {
			for _, path := range []string{pathCompletions, pathChatCompletions} {
				t.Run(fmt.Sprintf("%s/stream=%v%s", engine, stream, path), func(t *testing.T) {
					f := newPDFleet(t, pdTestOptions(), engine, 1, 1)
					res := post(t, testClient(), f.url(path), pdBody(path, stream, `,"n":3`), HeaderRequestID, "client-1")
					pre, dec := f.legCounts()
					if engine == spec.EngineTRTLLM {
						if res.status != 400 || errorCode(t, res.body) != pd.CodeShapeUnsupported {
							t.Fatalf("%d %s", res.status, res.body)
						}
						if sum(pre)+sum(dec) != 0 {
							t.Fatalf("refused request reached engines: %v %v", pre, dec)
						}
						return
					}
					if res.status != 200 {
						t.Fatalf("%d %s", res.status, res.body)
					}
					if got := choiceIndexes(t, res.body, stream); !slicesEqualInts(got, []int{0, 1, 2}) {
						t.Fatalf("choice indexes %v, want [0 1 2]: %s", got, res.body)
					}
					if stream {
						if n := strings.Count(res.body, "[DONE]"); n != 1 || !strings.HasSuffix(res.body, "data: [DONE]\n\n") {
							t.Fatalf("%d [DONE] markers / not last: %s", n, res.body)
						}
						if ids := streamIDs(res.body); len(ids) != 1 {
							t.Fatalf("chunks carry %d completion ids, want 1: %v", len(ids), ids)
						}
						texts := streamTexts(t, res.body, path)
						for i := range 3 {
							if texts[i] != texts[0] || texts[i] == "" {
								t.Fatalf("choice %d streamed %q, choice 0 %q: per-choice order lost", i, texts[i], texts[0])
							}
						}
					}
					if engine == spec.EngineVLLM {
						if sum(pre) != 0 || sum(dec) != 1 {
							t.Fatalf("legs: prefill %v decode %v, want the decode only", pre, dec)
						}
						rec := f.decodes[0].Records()[0]
						if rec.Violation != "" || bytes.Contains(rec.Body, []byte("kv_transfer_params")) {
							t.Fatalf("decode leg: violation %q body %s", rec.Violation, rec.Body)
						}
						waitCounter(t, f.reg, "infergate_pd_unsplit_requests_total", map[string]string{"reason": pd.ShapeN}, 1)
						return
					}
					// SGLang: three single-sample dual dispatches, three rooms.
					if sum(pre) != 3 || sum(dec) != 3 {
						t.Fatalf("legs: prefill %v decode %v, want 3 and 3", pre, dec)
					}
					rooms := map[string]bool{}
					ids := map[string]bool{}
					for _, rec := range append(f.prefills[0].Records(), f.decodes[0].Records()...) {
						var b map[string]json.RawMessage
						_ = json.Unmarshal(rec.Body, &b)
						if rec.Violation != "" || string(b["n"]) != "1" {
							t.Fatalf("unit leg: violation %q n %s", rec.Violation, b["n"])
						}
						rooms[string(b["bootstrap_room"])] = true
						ids[rec.Header.Get(HeaderRequestID)] = true
					}
					if len(rooms) != 3 || len(ids) != 3 || !ids["client-1-2"] {
						t.Fatalf("rooms %v ids %v: want one room and one request id per unit", rooms, ids)
					}
				})
			}
		}
	}
	t.Run("vllm/prompt list", func(t *testing.T) {
		f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1)
		res := post(t, testClient(), f.url(pathCompletions), `{"model":"fake-model","prompt":["a","b"],"max_tokens":3}`)
		pre, dec := f.legCounts()
		if res.status != 200 || sum(pre) != 0 || sum(dec) != 1 {
			t.Fatalf("%d prefill %v decode %v: %s", res.status, pre, dec, res.body)
		}
		waitCounter(t, f.reg, "infergate_pd_unsplit_requests_total", map[string]string{"reason": pd.ShapePromptList}, 1)
	})
	t.Run("sglang/prompt list x n", func(t *testing.T) {
		f := newPDFleet(t, pdTestOptions(), spec.EngineSGLang, 1, 1)
		res := post(t, testClient(), f.url(pathCompletions), `{"model":"fake-model","prompt":["alpha","beta"],"n":2,"max_tokens":3}`, HeaderRequestID, "c")
		if res.status != 200 {
			t.Fatalf("%d %s", res.status, res.body)
		}
		if got := choiceIndexes(t, res.body, false); !slicesEqualInts(got, []int{0, 1, 2, 3}) {
			t.Fatalf("indexes %v: %s", got, res.body)
		}
		// Unit i = prompt i/2, sample i%2: its request id says which.
		for _, rec := range f.decodes[0].Records() {
			var b struct {
				Prompt string `json:"prompt"`
			}
			_ = json.Unmarshal(rec.Body, &b)
			id := rec.Header.Get(HeaderRequestID)
			want := map[string]string{"c-0": "alpha", "c-1": "alpha", "c-2": "beta", "c-3": "beta"}[id]
			if b.Prompt != want {
				t.Fatalf("unit %s got prompt %q, want %q", id, b.Prompt, want)
			}
		}
	})
	t.Run("sglang/unit fails", func(t *testing.T) {
		f := newPDFleet(t, pdTestOptions(), spec.EngineSGLang, 1, 1)
		f.decodes[0].Inject(pdfake.Fault400, 1)
		res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, `,"n":2`))
		if res.status != 400 || res.header.Get(HeaderError) != "" || !strings.Contains(res.body, "injected fault") {
			t.Fatalf("want the failing unit's engine answer relayed: %d %v %s", res.status, res.header, res.body)
		}
	})
	t.Run("sglang/too wide", func(t *testing.T) {
		f := newPDFleet(t, pdTestOptions(), spec.EngineSGLang, 1, 1)
		res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, `,"n":33`))
		if res.status != 400 || errorCode(t, res.body) != pd.CodeShapeUnsupported {
			t.Fatalf("%d %s", res.status, res.body)
		}
	})
}

// choiceIndexes lists the distinct choice indexes of an answer (a whole
// object, or every event of a stream), sorted.
func choiceIndexes(t *testing.T, body string, stream bool) []int {
	t.Helper()
	seen := map[int]bool{}
	add := func(s string) {
		var v struct {
			Choices []struct {
				Index int `json:"index"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		for _, c := range v.Choices {
			seen[c.Index] = true
		}
	}
	if !stream {
		add(body)
	}
	for _, line := range strings.Split(body, "\n") {
		if p, ok := strings.CutPrefix(line, "data: "); ok && stream {
			add(p)
		}
	}
	var out []int
	for i := range 64 {
		if seen[i] {
			out = append(out, i)
		}
	}
	return out
}

// streamTexts concatenates each choice's streamed text in arrival order.
func streamTexts(t *testing.T, body, path string) map[int]string {
	t.Helper()
	out := map[int]string{}
	for _, line := range strings.Split(body, "\n") {
		p, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var v struct {
			Choices []struct {
				Index int    `json:"index"`
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(p), &v) != nil {
			continue
		}
		for _, c := range v.Choices {
			out[c.Index] += c.Text + c.Delta.Content
		}
	}
	return out
}

// streamIDs is the set of chunk ids of a stream.
func streamIDs(body string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if p, ok := strings.CutPrefix(line, "data: "); ok {
			var v struct {
				ID string `json:"id"`
			}
			if json.Unmarshal([]byte(p), &v) == nil && v.ID != "" {
				out[v.ID] = true
			}
		}
	}
	return out
}

func slicesEqualInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPDBadInput: the P/D-specific refusals, each with its code, none
// reaching an engine.
func TestPDBadInput(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1)
	c := testClient()
	tests := []struct {
		name, path, ct, body string
		status               int
		code, mention        string
	}{
		{"not JSON", pathCompletions, "application/json", "prompt=hello", 400, pd.CodeInvalidBody, pathCompletions},
		{"JSON array", pathChatCompletions, "application/json", `[1,2]`, 400, pd.CodeInvalidBody, pathChatCompletions},
		{"multipart", pathResponses, "multipart/form-data; boundary=x", "--x--", 400, pd.CodeInvalidBody, pathResponses},
		{"empty", pathCompletions, "application/json", "", 400, pd.CodeInvalidBody, pathCompletions},
		{"n zero", pathCompletions, "application/json", `{"prompt":"x","n":0}`, 400, pd.CodeInvalidN, "n must be"},
		{"n string", pathCompletions, "application/json", `{"prompt":"x","n":"3"}`, 400, pd.CodeInvalidN, "n must be"},
		{"n fraction", pathChatCompletions, "application/json", `{"messages":[],"n":1.5}`, 400, pd.CodeInvalidN, "n must be"},
		{"upload path", "/v1/audio/transcriptions", "multipart/form-data; boundary=x", "--x--", 404, CodePDPathRefused, "/v1/audio/transcriptions"},
		{"metrics path", "/metrics", "", "", 404, CodePDPathRefused, "/metrics"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, f.url(tc.path), strings.NewReader(tc.body))
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			res := do(t, c, req)
			if res.status != tc.status || errorCode(t, res.body) != tc.code || !strings.Contains(res.body, tc.mention) {
				t.Fatalf("got %d %s; want %d %s mentioning %q", res.status, res.body, tc.status, tc.code, tc.mention)
			}
		})
	}
	if p, d := f.legCounts(); sum(p)+sum(d) != 0 {
		t.Fatalf("bad input reached engines: %v %v", p, d)
	}
	// n = 1 and n = null are fine.
	for _, extra := range []string{`,"n":1`, `,"n":null`} {
		if res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, extra)); res.status != 200 {
			t.Fatalf("n%s: %d %s", extra, res.status, res.body)
		}
	}
}
