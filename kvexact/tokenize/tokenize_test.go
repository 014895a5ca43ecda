package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/infergate/infergate/metrics"
)

// fakeEngine is a recording /tokenize: one token per byte of the prompt,
// or of the messages JSON for chat, so the test knows the exact answer.
type fakeEngine struct {
	srv     *httptest.Server
	calls   atomic.Int64
	mu      sync.Mutex
	bodies  []map[string]json.RawMessage
	release chan struct{} // nil: answer at once; else wait for it
	status  int
}

func newFakeEngine(t *testing.T) *fakeEngine {
	t.Helper()
	f := &fakeEngine{status: http.StatusOK}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathTokenize || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		f.calls.Add(1)
		var req map[string]json.RawMessage
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.bodies = append(f.bodies, req)
		rel, status := f.release, f.status
		f.mu.Unlock()
		if rel != nil {
			select {
			case <-rel:
			case <-r.Context().Done():
				return
			}
		}
		if status != http.StatusOK {
			w.WriteHeader(status)
			return
		}
		src := req[FieldMessages]
		if p, ok := req[FieldPrompt]; ok {
			var s string
			_ = json.Unmarshal(p, &s)
			src = json.RawMessage(s)
		}
		ids := make([]uint32, len(src))
		for i, b := range src {
			ids[i] = uint32(b)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{FieldTokens: ids, FieldCount: len(ids), FieldMaxModelLen: 4096})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEngine) hostPort() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func newTok(t *testing.T, f *fakeEngine, timeout time.Duration) (*Engine, *metrics.KVRouting) {
	t.Helper()
	m := metrics.NewKVRouting(prometheus.NewRegistry())
	e, err := NewEngine(Options{Rule: "r", Endpoints: func() []string { return []string{f.hostPort()} }, Timeout: timeout, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, m
}

func TestTokens(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		body      string
		want      []uint32
		wantErr   error
		wantCalls int64
		wantField string // field sent to the engine
	}{
		{"completion prompt", "/v1/completions", `{"model":"m","prompt":"ab"}`, []uint32{'a', 'b'}, nil, 1, FieldPrompt},
		{"chat messages", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
			bytesIDs(`[{"role":"user","content":"x"}]`), nil, 1, FieldMessages},
		{"token id prompt used as is", "/v1/completions", `{"model":"m","prompt":[7,8,9]}`, []uint32{7, 8, 9}, nil, 0, ""},
		{"batch of strings unsupported", "/v1/completions", `{"model":"m","prompt":["a","b"]}`, nil, ErrUnsupported, 0, ""},
		{"no prompt", "/v1/completions", `{"model":"m"}`, nil, ErrNoPrompt, 0, ""},
		{"null prompt", "/v1/completions", `{"model":"m","prompt":null}`, nil, ErrNoPrompt, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEngine(t)
			e, _ := newTok(t, f, time.Second)
			got, err := e.Tokens(context.Background(), Request{Path: tc.path, Body: []byte(tc.body)})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if !equal(got, tc.want) {
				t.Fatalf("tokens = %v, want %v", got, tc.want)
			}
			if c := f.calls.Load(); c != tc.wantCalls {
				t.Fatalf("engine calls = %d, want %d", c, tc.wantCalls)
			}
			if tc.wantField != "" {
				b := f.bodies[0]
				if _, ok := b[tc.wantField]; !ok || string(b[FieldModel]) != `"m"` || len(b) != 2 {
					t.Fatalf("engine got %v, want model and %s only", b, tc.wantField)
				}
			}
		})
	}
}

func TestCacheKeyedByModelPathAndPrompt(t *testing.T) {
	f := newFakeEngine(t)
	e, m := newTok(t, f, time.Second)
	ctx := context.Background()
	reqs := []Request{
		{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"hello","max_tokens":1}`)},
		{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"hello","max_tokens":99}`)}, // other fields: hit
		{Path: "/v1/completions", Body: []byte(`{"model":"m2","prompt":"hello"}`)},                // other model: miss
		{Path: "/v1/completions", Model: "m3", Body: []byte(`{"model":"m","prompt":"hello"}`)},    // header model wins: miss
		{Path: "/v1/chat/completions", Body: []byte(`{"model":"m","prompt":"hello"}`)},            // other path: miss
		{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"hellO"}`)},                 // other prompt: miss
	}
	for i, r := range reqs {
		if _, err := e.Tokens(ctx, r); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if c := f.calls.Load(); c != 5 {
		t.Fatalf("engine calls = %d, want 5 (one cache hit)", c)
	}
	if h := cval(m.TokenizeCache.WithLabelValues("r", metrics.ResultHit)); h != 1 {
		t.Fatalf("cache hits = %v, want 1", h)
	}
	if h := cval(m.TokenizeCache.WithLabelValues("r", metrics.ResultMiss)); h != 5 {
		t.Fatalf("cache misses = %v, want 5", h)
	}
	if n := series(m.TokenizeDuration); n != 1 {
		t.Fatalf("duration series = %d, want 1 (result ok)", n)
	}
}

func TestCoalescing(t *testing.T) {
	f := newFakeEngine(t)
	f.release = make(chan struct{})
	e, m := newTok(t, f, 5*time.Second)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids, err := e.Tokens(context.Background(), Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"same"}`)})
			if err == nil && len(ids) != 4 {
				err = errors.New("wrong ids")
			}
			errs <- err
		}()
	}
	// Wait until the one flight reached the engine and every caller has
	// joined (each counted as miss or shared before waiting on the flight).
	deadline := time.After(5 * time.Second)
	for f.calls.Load() < 1 || cval(m.TokenizeCache.WithLabelValues("r", metrics.ResultShared))+
		cval(m.TokenizeCache.WithLabelValues("r", metrics.ResultMiss)) < n {
		select {
		case <-deadline:
			t.Fatal("no flight reached the engine")
		case <-time.After(time.Millisecond):
		}
	}
	close(f.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := f.calls.Load(); c != 1 {
		t.Fatalf("engine calls = %d, want 1 (all callers joined one flight)", c)
	}
	shared := cval(m.TokenizeCache.WithLabelValues("r", metrics.ResultShared))
	miss := cval(m.TokenizeCache.WithLabelValues("r", metrics.ResultMiss))
	hit := cval(m.TokenizeCache.WithLabelValues("r", metrics.ResultHit))
	if int(shared+miss+hit) != n || float64(f.calls.Load()) != miss {
		t.Fatalf("shared %v + miss %v + hit %v != %d, or engine calls %d != misses", shared, miss, hit, n, f.calls.Load())
	}
}

// TestCoalescedFlightHoldsAllCallers pins down the coalescing itself: a
// second caller arriving while the first is in flight must not reach the
// engine.
func TestCoalescedFlightHoldsAllCallers(t *testing.T) {
	f := newFakeEngine(t)
	f.release = make(chan struct{})
	e, m := newTok(t, f, 5*time.Second)
	body := Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"same"}`)}
	first := make(chan error, 1)
	go func() { _, err := e.Tokens(context.Background(), body); first <- err }()
	for f.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() { _, err := e.Tokens(context.Background(), body); second <- err }()
	for cval(m.TokenizeCache.WithLabelValues("r", metrics.ResultShared)) == 0 {
		time.Sleep(time.Millisecond)
	}
	close(f.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if c := f.calls.Load(); c != 1 {
		t.Fatalf("engine calls = %d, want 1", c)
	}
}

func TestFailuresFallThrough(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(f *fakeEngine)
		endpoints  func(f *fakeEngine) []string
		wantErr    error
		wantResult string
	}{
		{"timeout", func(f *fakeEngine) { f.release = make(chan struct{}) }, nil, context.DeadlineExceeded, metrics.ResultTimeout},
		{"engine 500", func(f *fakeEngine) { f.status = 500 }, nil, nil, metrics.ResultError},
		{"no endpoint", nil, func(*fakeEngine) []string { return nil }, ErrNoEndpoint, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEngine(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			m := metrics.NewKVRouting(prometheus.NewRegistry())
			eps := func() []string { return []string{f.hostPort()} }
			if tc.endpoints != nil {
				eps = func() []string { return tc.endpoints(f) }
			}
			// Only the timeout case needs a tight budget; the others get a
			// generous one so a loaded CI box cannot turn an engine 500 into
			// a timeout and record the wrong result.
			budget := 5 * time.Second
			if tc.wantResult == metrics.ResultTimeout {
				budget = 30 * time.Millisecond
			}
			e, err := NewEngine(Options{Rule: "r", Endpoints: eps, Timeout: budget, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			_, err = e.Tokens(context.Background(), Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"x"}`)})
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantResult != "" {
				// The flight records its outcome when it ends, which may be
				// just after the caller gave up.
				for i := 0; i < 500 && series(m.TokenizeDuration) == 0; i++ {
					time.Sleep(2 * time.Millisecond)
				}
				var dm dto.Metric
				h, err := m.TokenizeDuration.GetMetricWithLabelValues("r", tc.wantResult)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.(prometheus.Histogram).Write(&dm); err != nil || dm.GetHistogram().GetSampleCount() != 1 {
					t.Fatalf("duration{result=%s} count = %d (%v)", tc.wantResult, dm.GetHistogram().GetSampleCount(), err)
				}
				if c := cval(m.TokenizeCache.WithLabelValues("r", metrics.ResultHit)); c != 0 {
					t.Fatal("a failure was cached")
				}
			}
			if f.release != nil {
				close(f.release) // only now: the flight must end by its own deadline
			}
			// The duration is recorded inside the flight, just before it
			// leaves the group; a call made before then would share the
			// ending flight's result instead of asking again.
			for i := 0; i < 500 && inflight(&e.flight) > 0; i++ {
				time.Sleep(2 * time.Millisecond)
			}
			// Failures are not cached: the next call asks again.
			before := f.calls.Load()
			_, _ = e.Tokens(context.Background(), Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"x"}`)})
			if tc.endpoints == nil && f.calls.Load() == before {
				t.Fatal("failed tokenisation was cached")
			}
		})
	}
}

func TestCallerCancelDoesNotFailOthers(t *testing.T) {
	f := newFakeEngine(t)
	f.release = make(chan struct{})
	e, _ := newTok(t, f, 5*time.Second)
	body := Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"same"}`)}
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, err := e.Tokens(ctx, body); first <- err }()
	for f.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	second := make(chan error, 1)
	go func() { _, err := e.Tokens(context.Background(), body); second <- err }()
	close(f.release)
	if err := <-second; err != nil {
		t.Fatalf("second caller failed with the first's cancellation: %v", err)
	}
}

func bytesIDs(s string) []uint32 {
	out := make([]uint32, len(s))
	for i := range s {
		out[i] = uint32(s[i])
	}
	return out
}

func equal(a, b []uint32) bool {
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

func BenchmarkTokensCached(b *testing.B) {
	f := &fakeEngine{status: http.StatusOK}
	_ = f
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{FieldTokens: make([]uint32, 512), FieldCount: 512})
	}))
	defer srv.Close()
	e, err := NewEngine(Options{Rule: "r", Endpoints: func() []string { return []string{strings.TrimPrefix(srv.URL, "http://")} }})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	body := []byte(`{"model":"m","max_tokens":16,"prompt":"` + strings.Repeat("lorem ipsum ", 200) + `"}`)
	req := Request{Path: "/v1/completions", Body: body}
	if _, err := e.Tokens(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Tokens(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// cval reads a counter's value.
func cval(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// series counts a collector's series.
func series(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// TestPrescannedFields: a caller that already found the prompt passes it
// with the model and the body is not decoded (here it is not even JSON).
func TestPrescannedFields(t *testing.T) {
	f := newFakeEngine(t)
	e, _ := newTok(t, f, time.Second)
	got, err := e.Tokens(context.Background(), Request{Model: "m", Path: "/v1/completions", Body: []byte("not json"), Prompt: []byte(`"ab"`)})
	if err != nil || !equal(got, []uint32{'a', 'b'}) {
		t.Fatalf("tokens = %v, %v", got, err)
	}
	// Without a model the body is decoded, and a bad body is an error.
	if _, err := e.Tokens(context.Background(), Request{Path: "/v1/completions", Body: []byte("not json"), Prompt: []byte(`"ab"`)}); err == nil {
		t.Fatal("a bad body without a model must fail")
	}
}

// TestRenderFieldsForwarded: fields that change the engine's render reach
// /tokenize as given and key the cache; ones /tokenize rejects for the
// completion form are not sent.
func TestRenderFieldsForwarded(t *testing.T) {
	msgs := `[{"role":"user","content":"x"}]`
	tests := []struct {
		name     string
		path     string
		body     string
		prompt   string // pre-scanned prompt field ("" none)
		messages string // pre-scanned messages field ("" none)
		want     []string
	}{
		{"chat kwargs and tools", "/v1/chat/completions",
			`{"model":"m","messages":` + msgs + `,"tools":[{"type":"function"}],"chat_template_kwargs":{"enable_thinking":false},"temperature":0}`,
			"", msgs, []string{FieldChatTemplateKwargs, FieldMessages, FieldModel, FieldTools}},
		{"chat generation prompt off", "/v1/chat/completions",
			`{"model":"m","messages":` + msgs + `,"add_generation_prompt":false,"continue_final_message":true}`,
			"", "", []string{FieldAddGenerationPrompt, FieldContinueFinalMessage, FieldMessages, FieldModel}},
		{"completion special tokens, chat-only fields dropped", "/v1/completions",
			`{"model":"m","prompt":"ab","add_special_tokens":false,"tools":[]}`,
			`"ab"`, "", []string{FieldAddSpecialTokens, FieldModel, FieldPrompt}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEngine(t)
			e, _ := newTok(t, f, time.Second)
			req := Request{Model: "m", Path: tc.path, Body: []byte(tc.body)}
			if tc.prompt != "" {
				req.Prompt = json.RawMessage(tc.prompt)
			}
			if tc.messages != "" {
				req.Messages = json.RawMessage(tc.messages)
			}
			if _, err := e.Tokens(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			var got []string
			for k := range f.bodies[0] {
				got = append(got, k)
			}
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("/tokenize got fields %v, want %v", got, tc.want)
			}
		})
	}
	// Another render option is another cache entry.
	f := newFakeEngine(t)
	e, _ := newTok(t, f, time.Second)
	for _, kw := range []string{`{"enable_thinking":false}`, `{"enable_thinking":true}`, `{"enable_thinking":false}`} {
		body := `{"model":"m","messages":` + msgs + `,"chat_template_kwargs":` + kw + `}`
		if _, err := e.Tokens(context.Background(), Request{Path: "/v1/chat/completions", Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	if c := f.calls.Load(); c != 2 {
		t.Fatalf("engine calls = %d, want 2 (kwargs key the cache)", c)
	}
}

func TestMentionsRenderField(t *testing.T) {
	tests := []struct {
		body string
		want bool
	}{
		{`{"model":"m","prompt":"tools are great"}`, false},
		{`{"model":"m","prompt":"say \"tools\" please"}`, false}, // escaped: inside a string
		{`{"model":"m","messages":[],"tools":[]}`, true},
		{`{"model":"m","chat_template_kwargs":{}}`, true},
		{`{"model":"m","add_special_tokens":false}`, true},
		{`{"model":"m","add_generation_prompt_x":1}`, false},
		{`{"model":"m","`, false},
		{``, false},
	}
	for _, tc := range tests {
		if got := mentionsRenderField([]byte(tc.body)); got != tc.want {
			t.Errorf("mentionsRenderField(%s) = %v, want %v", tc.body, got, tc.want)
		}
	}
}

// inflight is the number of tokenisations running in g.
func inflight(g *group) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.calls)
}

func TestWaitScalesWithPrompt(t *testing.T) {
	tests := []struct {
		name     string
		perToken time.Duration
		bytes    int
		want     time.Duration
	}{
		{"fixed budget without a per-token cost", 0, 400 << 10, 50 * time.Millisecond},
		{"short prompt keeps the floor", 250 * time.Microsecond, 100, 50 * time.Millisecond},
		{"2,200-token prompt waits its prefill", 250 * time.Microsecond, 8800, 550 * time.Millisecond},
		{"agent-sized prompt capped", 250 * time.Microsecond, 400 << 10, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewEngine(Options{Rule: "r", Endpoints: func() []string { return nil }, Timeout: 50 * time.Millisecond, PerToken: tc.perToken})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if got := e.wait(tc.bytes); got != tc.want {
				t.Fatalf("wait(%d) = %v, want %v", tc.bytes, got, tc.want)
			}
		})
	}
}

// A slow /tokenize loses a short prompt (its floor is short: little to
// save) but not a long one, whose wait covers the prefill it may save.
func TestLongPromptWaitsForSlowTokenize(t *testing.T) {
	f := newFakeEngine(t)
	rel := make(chan struct{})
	f.release = rel
	m := metrics.NewKVRouting(prometheus.NewRegistry())
	e, err := NewEngine(Options{Rule: "r", Endpoints: func() []string { return []string{f.hostPort()} },
		Timeout: 20 * time.Millisecond, PerToken: 250 * time.Microsecond, MaxWait: 30 * time.Second, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Tokens(context.Background(), Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"x"}`)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("short prompt: err = %v, want a timeout", err)
	}
	long := strings.Repeat("word ", 20000) // 100 KB: a 25 s wait, capped at 30 s
	body, _ := json.Marshal(map[string]string{"model": "m", "prompt": long})
	time.AfterFunc(100*time.Millisecond, func() { close(rel) })
	ids, err := e.Tokens(context.Background(), Request{Path: "/v1/completions", Body: body})
	if err != nil {
		t.Fatalf("long prompt: %v", err)
	}
	if len(ids) != len(long) {
		t.Fatalf("long prompt: %d ids, want %d", len(ids), len(long))
	}
}
