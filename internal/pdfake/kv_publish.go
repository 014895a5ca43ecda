package pdfake

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/infergate/infergate/internal/kvfake"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/bpe"
)

// KVConfig makes a fake vLLM engine behave like one started with
// --kv-events-config: it serves POST /tokenize with a deterministic
// tokenizer and publishes real vLLM KV-event batches over ZMQ for every full
// block of each prompt it computes.
type KVConfig struct {
	// ZMQPort is the PUB port on the engine's IP (0: no publishing; -1: an
	// ephemeral port, see KVEndpoint).
	ZMQPort int
	// ConnectAddr, when set, connects to a gateway's bound SUB socket
	// instead of binding (topic kv@<ip:port>@<model>).
	ConnectAddr string
	// BlockSize is the engine's --block-size (16).
	BlockSize int
	// MapEncoding publishes events as maps (vLLM ≥ 0.26) instead of arrays.
	MapEncoding bool
	// ReplayPort binds vLLM's replay ROUTER on the engine's IP (0: none).
	ReplayPort int
	// TokenizeSkew makes /tokenize disagree with what the engine caches
	// (every id shifted by one, as after a tokenizer revision change): the
	// parity failure the gateway's zero-hit watchdog must notice.
	TokenizeSkew bool
	// Tokenizer, when set, tokenises text prompts as the real model does
	// (instead of FakeTokens): the gateway's in-process tokenizer must then
	// agree with the engine's cached blocks.
	Tokenizer *bpe.Tokenizer
}

// Wire names of the tokenizer endpoint and the fake's chat template.
const (
	pathTokenize     = "/tokenize"
	fieldPrompt      = "prompt"
	fieldMessages    = "messages"
	fieldTokens      = "tokens"
	fieldCount       = "count"
	fieldMaxModelLen = "max_model_len"
	fakeMaxModelLen  = 4096

	chatTurnStart = "<|im_start|>"
	chatTurnEnd   = "<|im_end|>"
)

// kvState is the engine's prefix cache as far as events go.
type kvState struct {
	cfg KVConfig
	pub *kvfake.Publisher

	mu      sync.Mutex
	stored  map[uint64]bool // engine hashes currently cached
	paused  bool
	restart bool // next publish starts again at seq 0 (engine restarted)

	// TensorRT-LLM: events wait in a buffer drained by /kv_cache_events.
	trt        bool
	trtEvents  []map[string]any
	trtNext    uint64
	trtCreated bool
}

// startKV wires /tokenize and the KV admin routes, and the publisher when
// configured (vLLM), or the event drain (TensorRT-LLM with KV.BlockSize set).
func (e *Engine) startKV(mux *http.ServeMux) error {
	if e.cfg.Dialect == TRTLLM && e.cfg.KV.BlockSize > 0 {
		e.startTRTEvents(mux)
		return nil
	}
	if e.cfg.Dialect != VLLM {
		return nil
	}
	mux.HandleFunc("POST "+pathTokenize, e.serveTokenize)
	if e.cfg.KV.ZMQPort == 0 && e.cfg.KV.ConnectAddr == "" {
		return nil
	}
	if e.cfg.KV.BlockSize <= 0 {
		e.cfg.KV.BlockSize = kvexact.DefaultBlockSize
	}
	o := kvfake.DefaultOptions()
	port := "*"
	if e.cfg.KV.ZMQPort > 0 {
		port = strconv.Itoa(e.cfg.KV.ZMQPort)
	}
	o.PubAddr = "tcp://" + net.JoinHostPort(e.addr.Addr().String(), port)
	o.ConnectAddr = e.cfg.KV.ConnectAddr
	if o.ConnectAddr != "" {
		o.Topic = "kv@" + e.addr.String() + "@" + e.cfg.Model
	}
	o.Encoding = kvfake.Encoding{MapEvents: e.cfg.KV.MapEncoding}
	if e.cfg.KV.ReplayPort > 0 {
		o.ReplayAddr = "tcp://" + net.JoinHostPort(e.addr.Addr().String(), strconv.Itoa(e.cfg.KV.ReplayPort))
	}
	pub, err := kvfake.Start(o)
	if err != nil {
		return fmt.Errorf("pdfake: KV publisher: %w", err)
	}
	e.kv = &kvState{cfg: e.cfg.KV, pub: pub, stored: map[uint64]bool{}}
	mux.HandleFunc("POST /admin/kv/restart", e.serveKVRestart)
	mux.HandleFunc("POST /admin/kv/stop", e.serveKVPause(true))
	mux.HandleFunc("POST /admin/kv/start", e.serveKVPause(false))
	return nil
}

func (e *Engine) closeKV() {
	if e.kv != nil && e.kv.pub != nil {
		e.kvOnce.Do(func() { _ = e.kv.pub.Close() })
	}
}

// KVEndpoint is the engine's PUB endpoint ("" without publishing).
func (e *Engine) KVEndpoint() string {
	if e.kv == nil || e.kv.pub == nil {
		return ""
	}
	return e.kv.pub.Endpoint()
}

// KVPublisher is the engine's publisher (nil without publishing), for
// tests that wait for subscribers.
func (e *Engine) KVPublisher() *kvfake.Publisher {
	if e.kv == nil || e.kv.pub == nil {
		return nil
	}
	return e.kv.pub
}

// FakeTokens is the fake's tokenizer: one id per whitespace-separated word
// (FNV-1a, offset past the ids of the chat markers). Deterministic, so a
// test and every fake agree.
func FakeTokens(text string) []uint32 {
	var out []uint32
	for _, w := range strings.Fields(text) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(w))
		out = append(out, 1000+h.Sum32()%100_000)
	}
	return out
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// FakeChatTemplate renders messages ChatML-style with a generation prompt.
func FakeChatTemplate(msgs []chatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s %s %s %s\n", chatTurnStart, m.Role, m.Content, chatTurnEnd)
	}
	b.WriteString(chatTurnStart + " assistant ")
	return b.String()
}

// promptTokens tokenises a request body's prompt or messages as the engine
// would; ok is false when there is neither.
func promptTokens(req map[string]json.RawMessage, tok *bpe.Tokenizer) ([]uint32, bool) {
	if raw, ok := req[fieldMessages]; ok && string(raw) != "null" {
		var msgs []chatMessage
		if json.Unmarshal(raw, &msgs) != nil {
			return nil, false
		}
		return FakeTokens(FakeChatTemplate(msgs)), true
	}
	raw, ok := req[fieldPrompt]
	if !ok {
		return nil, false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if tok != nil {
			return tok.Encode(s, true), true // vLLM/TRT-LLM completions add special tokens
		}
		return FakeTokens(s), true
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil {
		return ids, true
	}
	return nil, false
}

// serveTokenize is vLLM's POST /tokenize.
func (e *Engine) serveTokenize(w http.ResponseWriter, r *http.Request) {
	var req map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "invalid JSON body", http.StatusBadRequest)
		return
	}
	ids, ok := promptTokens(req, e.cfg.KV.Tokenizer)
	if !ok {
		http.Error(w, "prompt or messages required", http.StatusBadRequest)
		return
	}
	if ids == nil {
		ids = []uint32{}
	}
	if e.cfg.KV.TokenizeSkew {
		skewed := make([]uint32, len(ids))
		for i, id := range ids {
			skewed[i] = id + 1
		}
		ids = skewed
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{fieldTokens: ids, fieldCount: len(ids), fieldMaxModelLen: fakeMaxModelLen})
}

// kvPrefilled publishes BlockStored for the prompt's full blocks the engine
// did not hold yet, chained to the cached prefix (vLLM publishes only newly
// computed blocks).
func (e *Engine) kvPrefilled(req map[string]json.RawMessage) {
	if e.kv == nil {
		return
	}
	ids, ok := promptTokens(req, e.cfg.KV.Tokenizer)
	if !ok {
		return
	}
	bs := e.kv.cfg.BlockSize
	full := len(ids) / bs * bs
	if full == 0 {
		return
	}
	hashes := kvexact.SGLangChain(ids[:full], bs)
	s := e.kv
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused {
		return
	}
	first := 0
	for first < len(hashes) && s.stored[hashes[first]] {
		first++
	}
	if first == len(hashes) {
		return
	}
	var parent *uint64
	if first > 0 {
		parent = &hashes[first-1]
	}
	for _, h := range hashes[first:] {
		s.stored[h] = true
	}
	if s.trt {
		s.trtStoredLocked(hashes[first:], ids[first*bs:full], parent)
		return
	}
	ev := kvfake.BlockStored{BlockHashes: hashes[first:], TokenIDs: ids[first*bs : full], BlockSize: bs, Parent: parent}
	s.publishLocked(kvfake.Batch{Events: []any{ev}})
}

// publishLocked sends b, restarting the sequence at 0 after a restart.
func (s *kvState) publishLocked(b kvfake.Batch) {
	if s.restart {
		s.restart = false
		_ = s.pub.PublishSeq(0, b)
		return
	}
	_, _ = s.pub.Publish(b)
}

// serveKVRestart: POST /admin/kv/restart simulates an engine restart: the
// cache is empty and the sequence starts again at 0 (vLLM: with
// AllBlocksCleared; TensorRT-LLM: "created" at the next allocation).
func (e *Engine) serveKVRestart(w http.ResponseWriter, _ *http.Request) {
	s := e.kv
	s.mu.Lock()
	s.stored = map[uint64]bool{}
	if s.trt {
		// The ring restarts empty at event_id 0; "created" comes with the
		// first allocation.
		s.trtEvents, s.trtNext, s.trtCreated = nil, 0, false
	} else {
		s.restart = true
		s.publishLocked(kvfake.Batch{Events: []any{kvfake.AllBlocksCleared{}}})
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// serveKVPause: POST /admin/kv/stop and /admin/kv/start stop and resume
// publishing (blocks computed meanwhile are cached but never announced).
func (e *Engine) serveKVPause(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		e.kv.mu.Lock()
		e.kv.paused = paused
		e.kv.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}
}
