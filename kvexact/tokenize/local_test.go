package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/infergate/infergate/kvexact/bpe"
	"github.com/infergate/infergate/metrics"
)

// qwen3Dir is the Qwen3 tokenizer fixture of the bpe package (tokenizer.json.gz,
// tokenizer_config.json, expected.json from the reference implementation).
var qwen3Dir = filepath.Join("..", "bpe", "testdata", "qwen3")

var sharedLocal = sync.OnceValue(func() *Local {
	return NewLocal(LocalOptions{Models: map[string]string{"Qwen/Qwen3-0.6B": qwen3Dir}})
})

type refCase struct {
	Completions []struct {
		Text       string   `json:"text"`
		IDsSpecial []uint32 `json:"ids_special"`
	} `json:"completions"`
	Chats []struct {
		Messages            []bpe.Message `json:"messages"`
		AddGenerationPrompt bool          `json:"add_generation_prompt"`
		IDs                 []uint32      `json:"ids"`
	} `json:"chats"`
}

func loadRef(t testing.TB) refCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(qwen3Dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r refCase
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func body(t testing.TB, v map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLocalMatchesReference drives whole OpenAI bodies through Local and
// compares with the reference ids: completions with vLLM's default
// add_special_tokens=true, chats rendered by the model's template.
func TestLocalMatchesReference(t *testing.T) {
	l, ref := sharedLocal(), loadRef(t)
	if err := l.Preload(); err != nil {
		t.Fatal(err)
	}
	for i, c := range ref.Completions {
		b := body(t, map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": c.Text, "max_tokens": 4})
		got, err := l.Tokens(context.Background(), Request{Path: "/v1/completions", Body: b})
		if err != nil || !slices.Equal(got, c.IDsSpecial) {
			t.Errorf("completion %d: %v %v, want %v", i, got, err, c.IDsSpecial)
		}
	}
	for i, c := range ref.Chats {
		b := body(t, map[string]any{"model": "Qwen/Qwen3-0.6B", "messages": c.Messages, "add_generation_prompt": c.AddGenerationPrompt})
		got, err := l.Tokens(context.Background(), Request{Path: "/v1/chat/completions", Body: b})
		if err != nil || !slices.Equal(got, c.IDs) {
			t.Errorf("chat %d: %v %v, want %v", i, got, err, c.IDs)
		}
	}
}

// recorder is a fallback tokenizer that counts its calls.
type recorder struct{ calls atomic.Int64 }

func (r *recorder) Tokens(context.Context, Request) ([]uint32, error) {
	r.calls.Add(1)
	return []uint32{7}, nil
}

// TestChainFallsBack: what the in-process tokenizer cannot reproduce
// exactly goes to the engine; TensorRT-LLM (no fallback) gets
// ErrUnsupported; every outcome is counted.
func TestChainFallsBack(t *testing.T) {
	m := metrics.NewKV(prometheus.NewRegistry())
	tests := []struct {
		name     string
		body     map[string]any
		fallback bool // the engine must be asked
	}{
		{"completion", map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": "hello"}, false},
		{"client token ids", map[string]any{"model": "other", "prompt": []int{1, 2, 3}}, false},
		{"plain chat", map[string]any{"model": "Qwen/Qwen3-0.6B", "messages": []map[string]string{{"role": "user", "content": "hi"}}}, false},
		{"unknown model", map[string]any{"model": "meta/llama", "prompt": "hello"}, true},
		{"tools", map[string]any{"model": "Qwen/Qwen3-0.6B", "messages": []map[string]string{{"role": "user", "content": "hi"}}, "tools": []any{}}, true},
		{"multimodal content", map[string]any{"model": "Qwen/Qwen3-0.6B", "messages": []map[string]any{{"role": "user", "content": []any{map[string]string{"type": "text", "text": "hi"}}}}}, true},
		{"tool role", map[string]any{"model": "Qwen/Qwen3-0.6B", "messages": []map[string]string{{"role": "tool", "content": "{}"}}}, true},
		{"template kwargs", map[string]any{"model": "Qwen/Qwen3-0.6B", "messages": []map[string]string{{"role": "user", "content": "hi"}}, "chat_template_kwargs": map[string]bool{"enable_thinking": false}}, true},
		{"continue final message", map[string]any{"model": "Qwen/Qwen3-0.6B", "messages": []map[string]string{{"role": "user", "content": "hi"}}, "continue_final_message": true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := &recorder{}
			c := Chain{Local: sharedLocal(), Fallback: fb, Results: m.LocalTokenize, Rule: "r"}
			ids, err := c.Tokens(context.Background(), Request{Body: body(t, tt.body)})
			if err != nil || len(ids) == 0 {
				t.Fatalf("Tokens: %v %v", ids, err)
			}
			if asked := fb.calls.Load() == 1; asked != tt.fallback {
				t.Fatalf("engine asked = %v, want %v", asked, tt.fallback)
			}
			trt := Chain{Local: sharedLocal(), Results: m.LocalTokenize, Rule: "trt"}
			_, err = trt.Tokens(context.Background(), Request{Body: body(t, tt.body)})
			if tt.fallback != errors.Is(err, ErrUnsupported) {
				t.Fatalf("without a fallback: err %v, want unsupported=%v", err, tt.fallback)
			}
		})
	}
	cnt := func(rule, res string) float64 { return counterValue(t, m.LocalTokenize.WithLabelValues(rule, res)) }
	if cnt("r", LocalOK) != 3 || cnt("r", LocalFallback) != 6 || cnt("trt", LocalNone) != 6 {
		t.Fatalf("results ok=%v fallback=%v trt none=%v", cnt("r", LocalOK), cnt("r", LocalFallback), cnt("trt", LocalNone))
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestLocalBadPath: a tokenizer that does not load is reported by Preload
// and makes its model fall back instead of failing requests.
func TestLocalBadPath(t *testing.T) {
	l := NewLocal(LocalOptions{Models: map[string]string{AnyModel: t.TempDir()}})
	if err := l.Preload(); err == nil {
		t.Fatal("Preload accepted a directory without tokenizer.json")
	}
	_, err := l.Tokens(context.Background(), Request{Body: []byte(`{"model":"x","prompt":"hi"}`)})
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err %v, want unsupported", err)
	}
}

// benchPrompt is ~1 KiB of mixed prose, code and numbers; n makes every
// request unique so neither path serves from a prompt cache.
func benchPrompt(n int) string {
	return fmt.Sprintf("Request %d. ", n) + strings.Repeat("The gateway routes each prompt to the engine that already holds its KV blocks; "+
		"func route(p []byte) int { return hash(p) %% 8 } — 3.14159, 2026-12-01, naïve café. ", 6)
}

// BenchmarkTokenize compares the in-process tokenizer with the /tokenize
// round trip it replaces, in one run. "tokenize_roundtrip" asks a loopback
// HTTP server that answers the right number of canned ids without
// tokenising: the round trip and JSON alone, a lower bound of a real
// engine's /tokenize (which tokenises too). ns/op is the per-request
// latency, tokens/s one goroutine's throughput.
func BenchmarkTokenize(b *testing.B) {
	l := sharedLocal()
	if err := l.Preload(); err != nil { // loading is start-up work, not per request
		b.Fatal(err)
	}
	tok, err := bpe.LoadFile(filepath.Join(qwen3Dir, "tokenizer.json.gz"))
	if err != nil {
		b.Fatal(err)
	}
	canned := tok.Encode(benchPrompt(0), true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt string `json:"prompt"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		_ = json.NewEncoder(w).Encode(map[string]any{FieldTokens: canned, FieldCount: len(canned), FieldMaxModelLen: 40960})
	}))
	defer srv.Close()
	eng, err := NewEngine(Options{Rule: "bench", Timeout: 5 * time.Second, CacheSize: 1,
		Endpoints: func() []string { return []string{strings.TrimPrefix(srv.URL, "http://")} }})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	for _, tc := range []struct {
		name string
		t    Tokenizer
	}{{"in_process", l}, {"tokenize_roundtrip", eng}} {
		b.Run(tc.name, func(b *testing.B) {
			bodies := make([][]byte, 1024)
			for i := range bodies {
				bodies[i] = []byte(fmt.Sprintf(`{"model":"Qwen/Qwen3-0.6B","prompt":%q}`, benchPrompt(i)))
			}
			tokens := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Unique per iteration: the engine path's LRU must miss.
				bd := bodies[i%len(bodies)]
				if i >= len(bodies) {
					bd = []byte(fmt.Sprintf(`{"model":"Qwen/Qwen3-0.6B","prompt":%q}`, benchPrompt(i)))
				}
				ids, err := tc.t.Tokens(context.Background(), Request{Path: "/v1/completions", Body: bd})
				if err != nil {
					b.Fatal(err)
				}
				tokens += len(ids)
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// LocalOptions.Cache reaches every tokenizer Local loads; a zero field
// keeps bpe's default.
func TestLocalCacheOptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache bpe.Options
		want  bpe.Options
	}{
		{"zero: the defaults", bpe.Options{}, bpe.DefaultOptions()},
		{"trial area set", bpe.Options{SegmentTrialBytes: 1 << 20}, bpe.Options{SegmentCacheBytes: bpe.DefaultSegmentCacheBytes, SegmentTrialBytes: 1 << 20}},
		{"both set", bpe.Options{SegmentCacheBytes: 2 << 20, SegmentTrialBytes: 512 << 10}, bpe.Options{SegmentCacheBytes: 2 << 20, SegmentTrialBytes: 512 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLocal(LocalOptions{Models: map[string]string{AnyModel: qwen3Dir}, Cache: tc.cache})
			m := l.model("any")
			if m.err != nil {
				t.Fatal(m.err)
			}
			if got := m.tok.Options(); got != tc.want {
				t.Errorf("tokenizer loaded with %+v, want %+v", got, tc.want)
			}
		})
	}
}
