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
	switch r.URL.Path {
	case PathHealth:
		w.WriteHeader(int(s.health.Load()))
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	case PathModels:
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"fakeengine"}]}`, s.opts.Model)
	case PathCompletions, PathChatCompletions:
		if r.Method != http.MethodPost {
			writeErr(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		s.completion(w, r, r.URL.Path == PathChatCompletions)
	default:
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
		Stream bool `json:"stream"`
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
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
		s.served.Add(1)
		return
	}
	s.stream(w, r, chat, rid)
}

// stream writes one SSE event per token, then [DONE].
func (s *Server) stream(w http.ResponseWriter, r *http.Request, chat bool, rid string) {
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
		if _, err := w.Write(s.chunk(chat, i)); err != nil {
			s.gone(rid)
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
	_, _ = io.WriteString(w, sseDone)
	if fl != nil {
		fl.Flush()
	}
	s.served.Add(1)
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

func (s *Server) chunk(chat bool, i int) []byte {
	tok := "tok" + strconv.Itoa(i) + " "
	var v any
	if chat {
		v = map[string]any{"id": "chatcmpl-" + s.opts.Name, "object": "chat.completion.chunk", "model": s.opts.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": tok}}}}
	} else {
		v = map[string]any{"id": "cmpl-" + s.opts.Name, "object": "text_completion", "model": s.opts.Model,
			"choices": []any{map[string]any{"index": 0, "text": tok}}}
	}
	b, _ := json.Marshal(v)
	return append(append([]byte("data: "), b...), "\n\n"...)
}

func (s *Server) completionBody(chat bool) []byte {
	text := ""
	for i := range s.opts.Tokens {
		text += "tok" + strconv.Itoa(i) + " "
	}
	usage := map[string]int{"prompt_tokens": 1, "completion_tokens": s.opts.Tokens, "total_tokens": 1 + s.opts.Tokens}
	var v any
	if chat {
		v = map[string]any{"id": "chatcmpl-" + s.opts.Name, "object": "chat.completion", "model": s.opts.Model, "usage": usage,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "length", "message": map[string]string{"role": "assistant", "content": text}}}}
	} else {
		v = map[string]any{"id": "cmpl-" + s.opts.Name, "object": "text_completion", "model": s.opts.Model, "usage": usage,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "length", "text": text}}}
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
