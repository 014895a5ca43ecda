package enginesim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/bpe"
)

// testTemplate is the real Qwen3 chat template (a small file); the
// tokenizer is a byte-level BPE without merges (one token per byte), built
// here so the tests do not pay for loading a 150k-token vocabulary.
const testTemplate = "../../kvexact/bpe/testdata/qwen3/tokenizer_config.json"

// byteTokenizer builds a tokenizer.json whose vocabulary is the 256
// byte-level symbols (GPT-2's byte-to-unicode table) plus the ChatML
// markers as added tokens.
func byteTokenizer(t *testing.T) *bpe.Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae && b <= 0xff) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	doc := map[string]any{
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"added_tokens":  []map[string]any{{"id": 300, "content": "<|im_start|>"}, {"id": 301, "content": "<|im_end|>"}},
	}
	raw, _ := json.Marshal(doc)
	tok, err := bpe.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func startTestEngine(t *testing.T, mut func(*Config)) *Engine {
	t.Helper()
	tmpl, err := bpe.LoadTemplate(testTemplate)
	if err != nil {
		t.Fatal(err)
	}
	tok := byteTokenizer(t)
	cfg := Config{Options: DefaultOptions(), Addr: "127.0.0.1:0", Tokenizer: tok, Template: tmpl, EngineID: "test"}
	// Fast steps: these tests check behaviour, not time.
	cfg.DecodeStep, cfg.PrefillOverhead, cfg.PrefillPerToken = time.Millisecond, time.Millisecond, time.Microsecond
	if mut != nil {
		mut(&cfg)
	}
	e, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func post(t *testing.T, url string, body any) []byte {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, out)
	}
	return out
}

// TestKVEventsMatchCache subscribes to the engine's KV events with a real
// ZMQ SUB socket, replays them into a set and checks that it ends equal to
// the engine's cache — through stores, shared prefixes and evictions — and
// that every stored block carries its own tokens and vLLM block hash.
func TestKVEventsMatchCache(t *testing.T) {
	e := startTestEngine(t, func(c *Config) {
		c.ZMQAddr = "tcp://127.0.0.1:*"
		c.KVBlocks = 40 // small: later prompts evict earlier ones
	})
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = zctx.Term() }()
	sub, err := zctx.NewSocket(zmq.SUB)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	_ = sub.SetLinger(0)
	_ = sub.SetRcvtimeo(100 * time.Millisecond)
	if err := sub.SetSubscribe(""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Connect(e.KVEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := e.pub.WaitSubscribers(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	want := map[uint64][]uint32{} // every block hash a prompt can store → its tokens
	prompts := [][]uint32{
		join(tokens(1, 160), tokens(10_000, 40)),
		join(tokens(1, 160), tokens(20_000, 40)), // shares 10 blocks
		tokens(30_000, 300),
		tokens(40_000, 300), // evicts
		join(tokens(1, 160), tokens(50_000, 20)),
	}
	for _, p := range prompts {
		hs := e.core.BlockHashes(p)
		for i, h := range hs {
			want[h] = p[i*16 : (i+1)*16]
		}
		post(t, "http://"+e.Addr()+pathCompletions, map[string]any{"model": "m", "prompt": p, "max_tokens": 3})
	}

	got := map[uint64]bool{}
	var msg kvexact.Message
	var batch kvexact.Batch
	nextSeq, removed := uint64(0), 0
	deadline := time.Now().Add(5 * time.Second)
	cacheNow := func() []uint64 {
		e.mu.Lock()
		defer e.mu.Unlock()
		var hs []uint64
		for h := range e.core.cache.blocks {
			hs = append(hs, h)
		}
		slices.Sort(hs)
		return hs
	}
	keys := func() []uint64 {
		var hs []uint64
		for h := range got {
			hs = append(hs, h)
		}
		slices.Sort(hs)
		return hs
	}
	for !slices.Equal(keys(), cacheNow()) || removed == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("events replay to %d blocks (%d removed), cache holds %d", len(got), removed, len(cacheNow()))
		}
		frames, err := sub.RecvMessageBytes(0)
		if err != nil {
			continue
		}
		if err := kvexact.DecodeMessage(frames, &msg, &batch); err != nil {
			t.Fatal(err)
		}
		if msg.Seq != nextSeq {
			t.Fatalf("sequence %d, want %d", msg.Seq, nextSeq)
		}
		nextSeq++
		for _, ev := range batch.Events {
			switch ev.Kind {
			case kvexact.EventBlockStored:
				for i, h := range ev.BlockHashes {
					toks, ok := want[h]
					if !ok || !slices.Equal(toks, ev.TokenIDs[i*16:(i+1)*16]) || ev.BlockSize != 16 {
						t.Fatalf("stored block %x: tokens %v, want %v", h, ev.TokenIDs[i*16:(i+1)*16], toks)
					}
					if i == 0 && ev.HasParent && !got[ev.ParentHash] {
						t.Fatalf("stored block %x names parent %x, which is not cached", h, ev.ParentHash)
					}
					got[h] = true
				}
			case kvexact.EventBlockRemoved:
				for _, h := range ev.BlockHashes {
					if !got[h] {
						t.Fatalf("removed block %x was never stored", h)
					}
					delete(got, h)
					removed++
				}
			case kvexact.EventAllBlocksCleared:
				clear(got)
			}
		}
	}
}

// TestHTTPSurface: SSE completions and chats end with [DONE] and report
// cached tokens, /tokenize agrees with the cache's view of a prompt, and
// /metrics carries vLLM's names.
func TestHTTPSurface(t *testing.T) {
	e := startTestEngine(t, nil)
	base := "http://" + e.Addr()
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)
	var tk struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(post(t, base+pathTokenize, map[string]any{"model": "m", "prompt": prompt}), &tk); err != nil || tk.Count != len(tk.Tokens) || tk.Count < 100 {
		t.Fatalf("tokenize: %+v %v", tk, err)
	}

	stream := func(path string, body map[string]any) (chunks int, usage map[string]any) {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
		raw := post(t, base+path, body)
		sc := bufio.NewScanner(bytes.NewReader(raw))
		done := false
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if line == "[DONE]" {
				done = true
				continue
			}
			var c struct {
				Choices []json.RawMessage `json:"choices"`
				Usage   map[string]any    `json:"usage"`
			}
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				t.Fatalf("chunk %q: %v", line, err)
			}
			chunks += len(c.Choices)
			if c.Usage != nil {
				usage = c.Usage
			}
		}
		if !done {
			t.Fatalf("%s: no [DONE]", path)
		}
		return chunks, usage
	}
	for i, wantCached := range []float64{0, float64((tk.Count - 1) / 16 * 16)} {
		n, u := stream(pathCompletions, map[string]any{"model": "m", "prompt": prompt, "max_tokens": 5})
		details, _ := u["prompt_tokens_details"].(map[string]any)
		if n != 5 || u["prompt_tokens"] != float64(tk.Count) || details["cached_tokens"] != wantCached {
			t.Fatalf("completion %d: %d chunks, usage %v; want 5 chunks, %d prompt and %v cached tokens", i, n, u, tk.Count, wantCached)
		}
	}
	chat := map[string]any{"model": "m", "max_tokens": 4, "messages": []map[string]string{{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}}}
	if n, _ := stream(pathChatCompletions, chat); n != 5 { // the role chunk and four tokens
		t.Fatalf("chat: %d chunks, want 5", n)
	}
	// Every answer names the engine, so a client behind a router can tell
	// which one served it.
	named, err := http.Post(base+pathCompletions, "application/json", strings.NewReader(`{"model":"m","prompt":"hi","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, named.Body)
	named.Body.Close()
	if got := named.Header.Get(HeaderEngine); got != e.Addr() {
		t.Errorf("%s: %q, want %q", HeaderEngine, got, e.Addr())
	}

	resp, err := http.Get(base + pathMetrics)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{metricRunning, metricWaiting, metricKVUsage, metricPrefixQueries, metricPrefixHits, metricTTFT + "_bucket", metricPromptTokens, metricGenTokens, metricSuccess} {
		if !bytes.Contains(body, []byte(name+"{")) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	line := fmt.Sprintf("%s{engine=\"0\",model_name=\"sim-8b\"} %d\n", metricPrefixHits, e.Stats().PrefixHits)
	if e.Stats().PrefixHits == 0 || !bytes.Contains(body, []byte(line)) {
		t.Errorf("/metrics lacks %q", line)
	}
}

// TestConcurrentClients: many streams at once on few sequences slots all
// finish (the queue drains) and the counters add up.
func TestConcurrentClients(t *testing.T) {
	e := startTestEngine(t, func(c *Config) { c.MaxNumSeqs = 3 })
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post(t, "http://"+e.Addr()+pathCompletions, map[string]any{"model": "m", "prompt": tokens(uint32(1000*i), 64), "max_tokens": 4})
		}()
	}
	wg.Wait()
	if st := e.Stats(); st.Finished != 10 || st.GenerationTokens != 40 || st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("stats %+v, want 10 finished, 40 tokens, none running or waiting", st)
	}
}
