package fakeengine

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Wire names the fake reads or writes.
const (
	PathCompletions     = "/v1/completions"
	PathChatCompletions = "/v1/chat/completions"
	PathModels          = "/v1/models"
	PathHealth          = "/health"

	HeaderEngine    = "X-Fake-Engine" // the engine's Name on every response
	RetryAfter      = "7"             // Retry-After on injected 429/503
	HeaderRequestID = "X-Request-Id"
	sseDone         = "data: [DONE]\n\n"
)

// Options configure a fake engine. Zero values are sensible defaults.
type Options struct {
	Addr       string        // listen address, default 127.0.0.1:0
	Name       string        // echoed in X-Fake-Engine and completion ids
	Model      string        // default "fake-model"
	Tokens     int           // completion tokens (= SSE content chunks), default 4
	Latency    time.Duration // wait before answering a completion
	TokenDelay time.Duration // wait between SSE chunks
	NoLog      bool          // do not record requests (benchmarks)
	MaxLog     int           // records kept, default 10000
	// MaxModelLen, when set, is reported by /v1/models (as vLLM does) and
	// enforced: a prompt of more tokens (counted as bytes/BytesPerToken,
	// default 4) is refused with vLLM's 400.
	MaxModelLen   int
	BytesPerToken int
	// StreamChatOnly: /v1/completions ignores "stream" and answers plain
	// JSON; only /v1/chat/completions streams (engines or adapters that
	// stream on one path only).
	StreamChatOnly bool
	// TLS, when set, serves HTTPS (engines behind security 2 rules).
	TLS *tls.Config
}

// Request is one recorded completion request.
type Request struct {
	Method    string
	Path      string
	Header    http.Header
	Body      []byte
	RequestID string
	Stream    bool
}

// Server is a running fake engine.
type Server struct {
	opts Options
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	status     atomic.Int32 // forced completion status (0 = normal)
	hang       atomic.Bool
	drop       atomic.Bool
	health     atomic.Int32
	gate       atomic.Pointer[chan struct{}]
	inFlight   atomic.Int64
	served     atomic.Int64
	clientGone chan string // request ids whose client went away

	mu  sync.Mutex
	log []Request

	plainCompletion []byte
	plainChat       []byte
}

// Start listens and serves in the background.
func Start(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Model == "" {
		opts.Model = "fake-model"
	}
	if opts.Tokens <= 0 {
		opts.Tokens = 4
	}
	if opts.MaxLog <= 0 {
		opts.MaxLog = 10000
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("fakeengine: listen %s: %w", opts.Addr, err)
	}
	if opts.TLS != nil {
		ln = tls.NewListener(ln, opts.TLS)
	}
	s := &Server{opts: opts, ln: ln, done: make(chan struct{}), clientGone: make(chan string, 64)}
	s.health.Store(http.StatusOK)
	s.plainCompletion = s.completionBody(false)
	s.plainChat = s.completionBody(true)
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the bound "ip:port".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Port is the bound port.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Close stops the engine at once: listener and every connection (like a
// killed process). It releases any gated or hanging handler.
func (s *Server) Close() {
	s.Release()
	_ = s.srv.Close()
	<-s.done
}

// SetStatus makes every completion answer status with an OpenAI error body
// (0 restores normal answers).
func (s *Server) SetStatus(code int) { s.status.Store(int32(code)) }

// SetHang makes completions never answer until the client goes away.
func (s *Server) SetHang(v bool) { s.hang.Store(v) }

// SetDrop makes completions close the connection without any response.
func (s *Server) SetDrop(v bool) { s.drop.Store(v) }

// SetHealth sets the /health status (200 healthy).
func (s *Server) SetHealth(code int) { s.health.Store(int32(code)) }

// Gate makes streams stop after their first event until Release.
func (s *Server) Gate() {
	ch := make(chan struct{})
	s.gate.Store(&ch)
}

// Release opens the gate.
func (s *Server) Release() {
	if p := s.gate.Swap(nil); p != nil {
		close(*p)
	}
}

// ClientGone delivers the request id of every completion whose client
// connection closed before the engine finished.
func (s *Server) ClientGone() <-chan string { return s.clientGone }

// InFlight is the number of completions being served now.
func (s *Server) InFlight() int64 { return s.inFlight.Load() }

// Served is the number of completions answered so far.
func (s *Server) Served() int64 { return s.served.Load() }

// Requests returns a copy of the recorded completion requests.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderEngine, s.opts.Name)
	if id := r.Header.Get(HeaderRequestID); id != "" {
		w.Header().Set(HeaderRequestID, id)
	}
	if r.Method == http.MethodOptions || r.URL.Path != PathCompletions && r.URL.Path != PathChatCompletions && r.URL.Path != PathHealth && r.URL.Path != PathModels {
		if s.serveSurface(w, r) {
			return
		}
	}
	switch r.URL.Path {
	case PathHealth:
		w.WriteHeader(int(s.health.Load()))
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	case PathModels:
		w.Header().Set("Content-Type", "application/json")
		extra := ""
		if s.opts.MaxModelLen > 0 {
			extra = fmt.Sprintf(`,"max_model_len":%d`, s.opts.MaxModelLen)
		}
		_, _ = fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"fakeengine"%s}]}`, s.opts.Model, extra)
	case PathCompletions, PathChatCompletions:
		if r.Method != http.MethodPost {
			writeErr(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		s.completion(w, r, r.URL.Path == PathChatCompletions)
	default:
		s.recordPlain(r, nil)
		writeErr(w, http.StatusNotFound, "not found")
	}
}

func (s *Server) completion(w http.ResponseWriter, r *http.Request, chat bool) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var req struct {
		Stream        bool            `json:"stream"`
		N             int             `json:"n"`
		Prompt        json.RawMessage `json:"prompt"`
		Messages      json.RawMessage `json:"messages"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	var jerr error
	if len(body) > 0 {
		jerr = json.Unmarshal(body, &req)
	}
	rid := r.Header.Get(HeaderRequestID)
	if !s.opts.NoLog { // record what arrived, valid or not
		s.record(Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, RequestID: rid, Stream: req.Stream})
	}
	if jerr != nil {
		writeErr(w, http.StatusBadRequest, "invalid JSON: "+jerr.Error())
		return
	}
	if n := s.promptTokens(req.Prompt, req.Messages); s.opts.MaxModelLen > 0 && n > s.opts.MaxModelLen {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", s.opts.MaxModelLen, n))
		return
	}
	if s.opts.StreamChatOnly && !chat {
		req.Stream = false
	}
	ctx := r.Context()
	if s.drop.Load() {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
			}
		}
		return
	}
	if s.hang.Load() {
		<-ctx.Done()
		s.gone(rid)
		return
	}
	if s.opts.Latency > 0 && !sleep(ctx, s.opts.Latency) {
		s.gone(rid)
		return
	}
	if code := int(s.status.Load()); code != 0 {
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", RetryAfter)
		}
		writeErr(w, code, "injected failure")
		s.served.Add(1)
		return
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		b := s.plainCompletion
		if chat {
			b = s.plainChat
		}
		if req.N > 1 {
			b = s.completionBodyN(chat, req.N)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
		s.served.Add(1)
		return
	}
	s.stream(w, r, chat, rid, max(req.N, 1), req.StreamOptions.IncludeUsage)
}

// stream writes one SSE event per token, then [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, chat bool, rid string, n int, withUsage bool) {
	ctx := r.Context()
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for i := range s.opts.Tokens {
		if i == 1 {
			if p := s.gate.Load(); p != nil {
				select {
				case <-*p:
				case <-ctx.Done():
					s.gone(rid)
					return
				}
			}
		}
		if i > 0 && s.opts.TokenDelay > 0 && !sleep(ctx, s.opts.TokenDelay) {
			s.gone(rid)
			return
		}
		for c := range n { // n samples: one event per choice per token
			if _, err := w.Write(s.chunkFor(chat, i, c)); err != nil {
				s.gone(rid)
				return
			}
		}
		if fl != nil {
			fl.Flush()
		}
	}
	if withUsage {
		// OpenAI/vLLM: one last chunk with empty choices and the usage.
		_, _ = w.Write(s.usageChunk(chat, n))
	}
	_, _ = io.WriteString(w, sseDone)
	if fl != nil {
		fl.Flush()
	}
	s.served.Add(1)
}

// usageChunk counts every choice's tokens, as engines do for n > 1.
func (s *Server) usageChunk(chat bool, n int) []byte {
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	v := map[string]any{"id": "cmpl-" + s.opts.Name, "object": object, "model": s.opts.Model, "choices": []any{},
		"usage": map[string]int{"prompt_tokens": 1, "completion_tokens": n * s.opts.Tokens, "total_tokens": 1 + n*s.opts.Tokens}}
	b, _ := json.Marshal(v)
	return append(append([]byte("data: "), b...), "\n\n"...)
}

// promptTokens estimates a prompt's tokens from its JSON size.
func (s *Server) promptTokens(prompt, messages json.RawMessage) int {
	bpt := s.opts.BytesPerToken
	if bpt <= 0 {
		bpt = 4
	}
	return (len(prompt) + len(messages) + bpt - 1) / bpt
}

func (s *Server) gone(rid string) {
	select {
	case s.clientGone <- rid:
	default:
	}
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) >= s.opts.MaxLog {
		s.log = s.log[1:]
	}
	s.log = append(s.log, r)
}

func (s *Server) chunk(chat bool, i int) []byte { return s.chunkFor(chat, i, 0) }

// chunkFor is token i's event of choice c.
func (s *Server) chunkFor(chat bool, i, c int) []byte {
	tok := "tok" + strconv.Itoa(i) + " "
	var v any
	if chat {
		v = map[string]any{"id": "chatcmpl-" + s.opts.Name, "object": "chat.completion.chunk", "model": s.opts.Model,
			"choices": []any{map[string]any{"index": c, "delta": map[string]string{"content": tok}}}}
	} else {
		v = map[string]any{"id": "cmpl-" + s.opts.Name, "object": "text_completion", "model": s.opts.Model,
			"choices": []any{map[string]any{"index": c, "text": tok}}}
	}
	b, _ := json.Marshal(v)
	return append(append([]byte("data: "), b...), "\n\n"...)
}

func (s *Server) completionBody(chat bool) []byte { return s.completionBodyN(chat, 1) }

// completionBodyN is the whole answer with n identical choices.
func (s *Server) completionBodyN(chat bool, n int) []byte {
	text := ""
	for i := range s.opts.Tokens {
		text += "tok" + strconv.Itoa(i) + " "
	}
	usage := map[string]int{"prompt_tokens": 1, "completion_tokens": n * s.opts.Tokens, "total_tokens": 1 + n*s.opts.Tokens}
	choices := make([]any, n)
	for c := range n {
		if chat {
			choices[c] = map[string]any{"index": c, "finish_reason": "length", "message": map[string]string{"role": "assistant", "content": text}}
		} else {
			choices[c] = map[string]any{"index": c, "finish_reason": "length", "text": text}
		}
	}
	v := map[string]any{"id": "cmpl-" + s.opts.Name, "object": "text_completion", "model": s.opts.Model, "usage": usage, "choices": choices}
	if chat {
		v["id"], v["object"] = "chatcmpl-"+s.opts.Name, "chat.completion"
	}
	b, _ := json.Marshal(v)
	return b
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "fake_error", "code": code}})
	_, _ = w.Write(b)
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
