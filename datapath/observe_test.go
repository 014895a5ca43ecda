package datapath

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/infergate/infergate/accesslog"
	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
)

// lockedBuffer is a log sink shared by the handler goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// accessLines returns the access lines logged so far, decoded.
func (l *lockedBuffer) accessLines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var m map[string]any
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == accesslog.Message {
			out = append(out, m)
		}
	}
	return out
}

// waitAccessLines waits for n access lines (the line is written when the
// handler returns, which a client reading a sized body may beat) and
// returns them; for n = 0 it gives a late line a moment to show up.
func (l *lockedBuffer) waitAccessLines(t *testing.T, n int) []map[string]any {
	t.Helper()
	if n == 0 {
		time.Sleep(100 * time.Millisecond)
	} else {
		waitFor(t, 5*time.Second, "access lines", func() bool { return len(l.accessLines(t)) >= n })
	}
	return l.accessLines(t)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func jsonLogRuntime(t *testing.T, o Options) (*Runtime, *lockedBuffer) {
	t.Helper()
	buf := &lockedBuffer{}
	log := logrus.New()
	log.SetOutput(buf)
	log.SetFormatter(&logrus.JSONFormatter{})
	rt := New(o, nil, log)
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	return rt, buf
}

func histCount(t *testing.T, h *metrics.HistogramVec, labels ...string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(labels...).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestAccessLogAndLLMLatency: a streamed completion through a single pool
// gives one JSON access line with the rule, VIP, endpoint, tier, status,
// TTFT and duration, and no prompt, query or key; the client-side TTFT,
// inter-token and per-token histograms see the stream's timing.
func TestAccessLogAndLLMLatency(t *testing.T) {
	rt, logs := jsonLogRuntime(t, testOptions())
	const tokens, gap = 5, 20 * time.Millisecond
	e := startEngine(t, "e1", func(o *fakeengine.Options) { o.Tokens, o.TokenDelay = tokens, gap })
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	const secret = "SECRET-PROMPT-TEXT"
	res := post(t, c, ruleURL(r)+"/v1/chat/completions?api_key=SECRET-QUERY",
		`{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"`+secret+`"}]}`,
		"Authorization", "Bearer SECRET-KEY")
	if res.status != 200 || !strings.Contains(res.body, "[DONE]") {
		t.Fatalf("stream: %d %s", res.status, res.body)
	}
	lines := logs.waitAccessLines(t, 1)
	if len(lines) != 1 {
		t.Fatalf("%d access lines, want 1:\n%s", len(lines), logs.String())
	}
	l := lines[0]
	want := map[string]any{
		"rule": r.Name, "vip": r.Key.ListenAddr().String(), "endpoint": e.Addr(), "tier": "rr",
		"status": 200.0, "method": "POST", "path": "/v1/chat/completions", "request_id": res.header.Get(HeaderRequestID),
		"client": "127.0.0.1", "component": "access", "model": "fake-model",
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("access line %s = %v, want %v", k, l[k], v)
		}
	}
	ttft, _ := l["ttft_ms"].(float64)
	total, _ := l["duration_ms"].(float64)
	// The engine sleeps the gaps between its first and last token, all
	// inside the request's duration; the first token's own relay may be
	// late on a loaded box, so the gaps are not counted from it.
	if ttft <= 0 || ttft >= total || total < float64((tokens-1)*gap/time.Millisecond) {
		t.Errorf("ttft_ms %v duration_ms %v: want 0 < ttft < duration, and the %d token gaps in it", ttft, total, tokens-1)
	}
	for _, s := range []string{secret, "SECRET-QUERY", "SECRET-KEY"} {
		if strings.Contains(logs.String(), s) {
			t.Fatalf("the log holds %q:\n%s", s, logs.String())
		}
	}

	if n, _ := histCount(t, rt.llm.TTFT, r.Name, "fake-model"); n != 1 {
		t.Errorf("TTFT observations %d, want 1", n)
	}
	if n, sum := histCount(t, rt.llm.ITL, r.Name, "fake-model"); n < tokens-1 || sum/float64(n) < gap.Seconds()/4 {
		t.Errorf("inter-token gaps: %d observations, mean %.4fs; want ≥ %d around %v", n, sum/float64(n), tokens-1, gap)
	}
	if n, sum := histCount(t, rt.llm.TPOT, r.Name, "fake-model"); n != 1 || sum < gap.Seconds()/4 || sum > 4*gap.Seconds() {
		t.Errorf("time per output token: %d observations, %.4fs; want 1 around %v", n, sum, gap)
	}
	if n, _ := histCount(t, rt.llm.Endpoint, r.Name, e.Addr(), "serve"); n != 1 {
		t.Errorf("endpoint latency observations %d, want 1", n)
	}
}

// TestAccessLogRefusals: requests refused before any engine still get a
// line with their status and error code; a disabled access log writes none.
func TestAccessLogRefusals(t *testing.T) {
	tests := []struct {
		name  string
		opts  func(*Options)
		lines int
	}{
		{"on by default", func(*Options) {}, 1},
		{"off", func(o *Options) { o.AccessLog.Enabled = false }, 0},
		{"errors kept when sampling nothing", func(o *Options) { o.AccessLog.SampleRate = 0 }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions()
			tt.opts(&o)
			rt, logs := jsonLogRuntime(t, o)
			e := startEngine(t, "e1")
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
			r.AllowedPaths = []string{"/v1/completions"}
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			res := post(t, testClient(), ruleURL(r)+"/v1/chat/completions", `{}`)
			if res.status != http.StatusNotFound {
				t.Fatalf("status %d", res.status)
			}
			lines := logs.waitAccessLines(t, tt.lines)
			if len(lines) != tt.lines {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), tt.lines, logs.String())
			}
			if tt.lines == 1 && (lines[0]["error"] != CodePathNotAllowed || lines[0]["status"] != 404.0 || lines[0]["endpoint"] != nil) {
				t.Fatalf("line %v", lines[0])
			}
		})
	}
}

// TestAccessLogPD: a P/D request's line names the tier that chose, both
// endpoints and each leg with its status and duration, and the prefill leg
// feeds the per-endpoint latency.
func TestAccessLogPD(t *testing.T) {
	for _, engine := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM} {
		t.Run(string(engine), func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), engine, 1, 1)
			logs := &lockedBuffer{}
			log := logrus.New()
			log.SetOutput(logs)
			log.SetFormatter(&logrus.JSONFormatter{})
			f.rt.access = accesslog.New(accesslog.DefaultOptions(), log, nil)
			res := post(t, testClient(), f.url("/v1/completions"), pdBody("/v1/completions", true, ""))
			if res.status != 200 {
				t.Fatalf("status %d %s", res.status, res.body)
			}
			lines := logs.waitAccessLines(t, 1)
			if len(lines) != 1 {
				t.Fatalf("%d lines:\n%s", len(lines), logs.String())
			}
			l := lines[0]
			pre, dec := f.prefills[0].Endpoint().ID, f.decodes[0].Endpoint().ID
			if l["prefill"] != pre || l["endpoint"] != dec || l["tier"] == nil || l["model"] != "fake-model" {
				t.Fatalf("line %v: want prefill %s, decode %s, a tier and the model", l, pre, dec)
			}
			legs, _ := l["legs"].([]any)
			if len(legs) != 2 {
				t.Fatalf("legs %v: want prefill and decode", l["legs"])
			}
			// SGLang's legs run concurrently: the decode may finish the
			// answer before the prefill's own answer arrives, and the line
			// then records the prefill leg without a status (0) and no
			// prefill latency. The other dialects run the prefill first.
			prefillAnswered := true
			for k, phase := range []string{"prefill", "decode"} {
				leg := legs[k].(map[string]any)
				if engine == spec.EngineSGLang && phase == "prefill" && leg["phase"] == phase && leg["status"] == 0.0 {
					prefillAnswered = false
					continue
				}
				if leg["phase"] != phase || leg["status"] != 200.0 {
					t.Errorf("leg %d = %v, want %s 200", k, leg, phase)
				}
			}
			if n, _ := histCount(t, f.rt.llm.Endpoint, f.rule.Name, pre, "prefill"); prefillAnswered && n != 1 {
				t.Errorf("prefill endpoint latency observations %d, want 1", n)
			}
			if n, _ := histCount(t, f.rt.llm.TTFT, f.rule.Name, "fake-model"); n != 1 {
				t.Errorf("TTFT observations under the served model %d, want 1", n)
			}
		})
	}
}

func TestAnswerModel(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"id":"x","object":"chat.completion","model":"qwen3-8b","choices":[]}`, "qwen3-8b"},
		{`data: {"id":"x","model": "llama","choices":[]}` + "\n\n", "llama"},
		{"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-ish\"}}\n\n", "claude-ish"},
		{`{"model":null}`, ""},
		{`{"model":"esc\"aped"}`, ""},
		{`{"model":"` + strings.Repeat("m", 200) + `"}`, ""},
		{`{"model":"unterminated`, ""},
		{`{"object":"list"}`, ""},
	}
	var last lastModel
	for _, tt := range tests {
		if got := last.string(answerModel([]byte(tt.in))); got != tt.want {
			t.Errorf("answerModel(%.60q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestIndexModelKey holds the 'm'-first search to bytes.Index's answer.
func TestIndexModelKey(t *testing.T) {
	for _, in := range []string{
		"", "m", `"m`, `"model"`, `"model":`, `model":`, `x"model":"a"`, `{"mm":1,"model":"a"}`,
		`{"id":"chatcmpl-m","object":"chat.completion","model":"q"}`, `"modelx":1,"model":2`,
		`{"a":"m\"model\":"}`, `mmmm"model":` + `"model":`, strings.Repeat("m", 100) + `"model":"z"`,
	} {
		if got, want := indexModelKey([]byte(in)), bytes.Index([]byte(in), []byte(`"model":`)); got != want {
			t.Errorf("indexModelKey(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestIndexModelKeyEveryOffset holds the search to bytes.Index's answer
// with the key (whole, or cut short at the end of b) at every offset
// behind fillers of 'm's, quotes and others.
func TestIndexModelKeyEveryOffset(t *testing.T) {
	for _, fill := range []string{"x", "m", `"`, `"m`} {
		for _, tail := range []string{modelKey + `"a"`, modelKey, modelKey[:7], `"mo` + modelKey} {
			for off := range 20 {
				in := []byte(strings.Repeat(fill, off) + tail)
				if got, want := indexModelKey(in), bytes.Index(in, []byte(modelKey)); got != want {
					t.Errorf("indexModelKey(%q) = %d, want %d", in, got, want)
				}
			}
		}
	}
}

// TestModelKeyWord holds the key's word to its spelling.
func TestModelKeyWord(t *testing.T) {
	if got := binary.LittleEndian.Uint64([]byte(modelKey)); got != modelKeyWord {
		t.Errorf("modelKeyWord %#x, want %#x", uint64(modelKeyWord), got)
	}
}

// TestLastModelRead feeds one rule's answers in order: each read must be
// answerModel's, whatever name the previous answer left behind (the
// shortcut for the last name must not take a longer name, an escaped one
// or one not closed for it).
func TestLastModelRead(t *testing.T) {
	var last lastModel
	for _, in := range []string{
		`{"model":"fake-model"}`,
		`{"model":"fake-model"}`,
		`{"model":"fake-model2"}`,
		`{"model":"fake-model"}`,
		`{"model":"fake-model\"x"}`,
		`{"model":"fake-model`,
		`{"model":"fake"}`,
		`{"model": "fake"}`,
		`{"model":""}`,
		`{"model":"fake`,
		`{"id":"cmpl-1","object":"text_completion"}`,
		`{"model":"` + strings.Repeat("m", 200) + `"}`,
		`{"model":"fake"}`,
	} {
		if got, want := last.read([]byte(in)), string(answerModel([]byte(in))); got != want {
			t.Errorf("read(%.60q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzAnswerModel holds the key search to bytes.Index and the rule's
// read, after a first answer that leaves a last name behind, to
// answerModel.
func FuzzAnswerModel(f *testing.F) {
	f.Add(`{"model":"fake-model"}`, `{"id":"cmpl-x","model":"fake-model2"}`)
	f.Add(`{"model":"q"}`, `{"model":"q\\"}`)
	f.Fuzz(func(t *testing.T, first, in string) {
		if got, want := indexModelKey([]byte(in)), bytes.Index([]byte(in), []byte(modelKey)); got != want {
			t.Fatalf("indexModelKey(%q) = %d, want %d", in, got, want)
		}
		var last lastModel
		last.read([]byte(first))
		if got, want := last.read([]byte(in)), string(answerModel([]byte(in))); got != want {
			t.Fatalf("after %q, read(%q) = %q, want %q", first, in, got, want)
		}
	})
}

// TestLastModelReuses checks the per-rule copy of an answer's model name:
// the same name costs no allocation, a new one replaces it. The result is
// kept (got) and its bytes compared with the first copy's: a discarded
// copy of a short name can live on the stack and cost no allocation even
// when nothing is reused.
func TestLastModelReuses(t *testing.T) {
	var last lastModel
	first := last.string([]byte("qwen3-8b"))
	again := []byte("qwen3-8b")
	var got string
	if n := testing.AllocsPerRun(100, func() { got = last.string(again) }); n != 0 {
		t.Errorf("allocations for a repeated model %.1f, want 0", n)
	}
	if got != first || unsafe.StringData(got) != unsafe.StringData(first) {
		t.Errorf("repeated model %q is not the first copy of %q", got, first)
	}
	if got := last.string([]byte("llama")); got != "llama" {
		t.Errorf("new model %q, want llama", got)
	}
	if got := last.string(nil); got != "" {
		t.Errorf("no model %q, want empty", got)
	}
}

// BenchmarkAnswerModel reads the model from the head of the fake engine's
// completion, as FirstBytes does: the key some 90 bytes in, behind an 'm'
// of the id, and the rule's last name the same.
func BenchmarkAnswerModel(b *testing.B) {
	head := []byte(`{"choices":[{"finish_reason":"length","index":0,"text":"tok0 tok1 tok2 tok3 "}],"id":"cmpl-fake","model":"fake-model","object":"text_completion"}`)
	var last lastModel
	for b.Loop() {
		if last.read(head) == "" {
			b.Fatal("no model")
		}
	}
}
