package pdfake

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/spec"
)

// Dialect is the engine family a fake speaks.
type Dialect string

const (
	VLLM   Dialect = "vllm"
	SGLang Dialect = "sglang"
	TRTLLM Dialect = "trtllm"
)

// Role is the fake's part in disaggregation (TRT-LLM: prefill = context,
// decode = generation).
type Role string

const (
	Prefill Role = "prefill"
	Decode  Role = "decode"
)

// Fault is an injected failure of one inference request.
type Fault string

const (
	FaultNone Fault = ""
	Fault500  Fault = "500"
	Fault400  Fault = "400"
	// FaultDropBeforeFirstByte closes the connection without a response.
	FaultDropBeforeFirstByte Fault = "drop-before-first-byte"
	// FaultDropAfterFirstByte sends the status, headers and part of the body,
	// then closes the connection.
	FaultDropAfterFirstByte Fault = "drop-after-first-byte"
	// FaultHang never answers; it waits for the client to go away.
	FaultHang Fault = "hang"
	// FaultStall sends the first body bytes, then goes silent until the
	// client goes away.
	FaultStall Fault = "stall"
)

// AllFaults lists every injectable fault, for parameterised suites.
func AllFaults() []Fault {
	return []Fault{Fault500, Fault400, FaultDropBeforeFirstByte, FaultDropAfterFirstByte, FaultHang, FaultStall}
}

// Config configures one fake engine.
type Config struct {
	Dialect Dialect
	Role    Role
	// Addr is the listen address, e.g. "127.0.0.2:0".
	Addr string
	// NixlPort is the vLLM NIXL side-channel port the prefill reports as
	// remote_port (0: the HTTP port).
	NixlPort uint16
	// BootstrapPort is the SGLang prefill's bootstrap server port on the same
	// IP (0: ephemeral).
	BootstrapPort uint16
	// RendezvousTimeout bounds how long an SGLang leg waits for its peer.
	RendezvousTimeout time.Duration
	// StreamChunks is how many token events a streaming answer has.
	StreamChunks int
	// ChunkDelay is the pause between streamed events.
	ChunkDelay time.Duration
	// HonorMaxTokens caps every answer at the client's max_tokens
	// (max_completion_tokens, max_output_tokens), one word or streamed event
	// per token, finishing with "length" (Anthropic: "max_tokens") when cut,
	// as engines do. Off by default: tests count StreamChunks events
	// whatever the request asks; the demo turns it on.
	HonorMaxTokens bool
	// ExportMetrics serves GET /metrics with the engine's own load families
	// (vLLM: vllm:num_requests_running, …_waiting, kv_cache_usage_perc,
	// request_success_total; SGLang: sglang:num_running_reqs, num_queue_reqs,
	// token_usage, num_requests_total), running being the requests in
	// flight. Off by default: tests decide by the gateway's own in-flight
	// counts unless they ask; the demo turns it on so its views show engine
	// load. TRT-LLM's iteration stats are not served.
	ExportMetrics bool
	// Model is reported in responses.
	Model string
	// MaxModelLen, when set, is the context window GET /v1/models reports
	// on the model's card as max_model_len (vLLM's and SGLang's cards carry
	// it; TRT-LLM's do not). SetMaxModelLen changes it while serving.
	MaxModelLen int
	// MaxRunningRequests, when set, is the batch limit the engine reports
	// where its kind does (serverinfo.go): SGLang's GET /server_info and
	// /get_server_info, vLLM's dev-mode GET /server_info. SetMaxRunningRequests
	// changes it while serving (an engine restarted with another limit).
	MaxRunningRequests int
	// AdvertiseHost is the host the engine expects as bootstrap_host
	// (SGLang) and reports as remote_host (vLLM). Empty: the listen IP, or
	// no SGLang host check when listening on an unspecified address.
	AdvertiseHost string
	// Connector is a vLLM fake's KV connector (Connector…; "" is NIXL). A
	// Mooncake prefill runs a bootstrap server on BootstrapPort.
	Connector string
	// MoRIIOMode is a MoRI-IO fake's mode, read or write (its moriio_mode
	// label in Endpoint).
	MoRIIOMode string
	// MoRIIOFabric, when set, links WRITE-mode MoRI-IO fakes' side
	// channels: decodes notify prefills and wait for their push
	// (moriio_write.go). Nil: no push is modelled.
	MoRIIOFabric *MoRIIOFabric
	// DPSize is a vLLM engine's data-parallel size. A Mooncake prefill's
	// bootstrap server lists one engine per rank (mooncake_dp.go); a
	// MoRI-IO prefill places each leg on a rank the same way, reports the
	// size in its handoff and listens per rank on the side-channel fabric;
	// a MoRI-IO decode runs each leg on a rank of its own balancer's. 0 or
	// 1: one.
	DPSize int
	// KV makes a vLLM fake serve /tokenize and publish KV events (kv_publish.go).
	KV KVConfig
	// TLS, when set, serves the inference API over HTTPS (security 2 legs).
	// The SGLang bootstrap server stays plaintext: it is the engines' side
	// channel, not the gateway's.
	TLS *tls.Config
}

// DefaultConfig returns a config for dialect/role on an ephemeral port of
// 127.0.0.1.
func DefaultConfig(d Dialect, r Role) Config {
	return Config{
		Dialect:           d,
		Role:              r,
		Addr:              "127.0.0.1:0",
		RendezvousTimeout: 5 * time.Second,
		StreamChunks:      5,
		Model:             "fake-model",
	}
}

// Record is one inference request as the engine received it.
type Record struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	Fault  Fault // fault applied to this request
	// Violation is the protocol violation the engine detected ("" none);
	// such requests are answered with an error like the real engine would.
	Violation string
	// Cancelled: the client closed the connection while the engine was
	// still working on the request (rendezvous wait, hang, stall, stream).
	Cancelled bool
	// Done: the handler has returned.
	Done bool
}

// Engine is a running fake.
type Engine struct {
	cfg      Config
	addr     netip.AddrPort
	srv      *http.Server
	boot     *http.Server // SGLang prefill bootstrap server
	bootPort uint16
	wg       sync.WaitGroup
	stop     chan struct{} // closed by Close: releases hangs and rendezvous waits
	stopOnce sync.Once
	kvOnce   sync.Once    // closeKV: Close may be called twice (a test's kill and its cleanup)
	window   atomic.Int64 // max_model_len on the /v1/models card (0: none)
	batch    atomic.Int64 // batch limit /server_info reports (0: none)
	running  atomic.Int64 // inference requests in flight (ExportMetrics)
	finished atomic.Int64 // inference requests answered (ExportMetrics)

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every record change
	records  []*Record
	side     []Record // side-path requests (surface.go)
	faults   []Fault
	finish   string // TRT context finish_reason override
	served   int
	rooms    map[uint64]*rendezvous
	engineID string
	client   *http.Client // SGLang decode → prefill bootstrap joins
	kv       *kvState     // vLLM KV-event publishing; nil when off
	dp       mooncakeDP   // Mooncake transfers per DP rank (mooncake_dp.go)
}

// Start runs a fake engine until Close.
func Start(cfg Config) (*Engine, error) {
	d := DefaultConfig(cfg.Dialect, cfg.Role)
	if cfg.Addr == "" {
		cfg.Addr = d.Addr
	}
	if cfg.RendezvousTimeout <= 0 {
		cfg.RendezvousTimeout = d.RendezvousTimeout
	}
	if cfg.StreamChunks <= 0 {
		cfg.StreamChunks = d.StreamChunks
	}
	if cfg.Model == "" {
		cfg.Model = d.Model
	}
	switch cfg.Dialect {
	case VLLM, SGLang, TRTLLM:
	default:
		return nil, fmt.Errorf("pdfake: unknown dialect %q", cfg.Dialect)
	}
	if cfg.Role != Prefill && cfg.Role != Decode {
		return nil, fmt.Errorf("pdfake: unknown role %q", cfg.Role)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("pdfake: listen %s: %w", cfg.Addr, err)
	}
	e := &Engine{
		cfg:     cfg,
		addr:    ln.Addr().(*net.TCPAddr).AddrPort(),
		stop:    make(chan struct{}),
		changed: make(chan struct{}),
		rooms:   map[uint64]*rendezvous{},
		client:  &http.Client{Transport: &http.Transport{}, Timeout: cfg.RendezvousTimeout},
	}
	e.addr = netip.AddrPortFrom(e.addr.Addr().Unmap(), e.addr.Port())
	e.engineID = fmt.Sprintf("%s-engine-%s", cfg.Role, strings.ReplaceAll(e.addr.String(), ":", "-"))
	e.window.Store(int64(cfg.MaxModelLen))
	e.batch.Store(int64(cfg.MaxRunningRequests))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":"ok","role":%q}`, cfg.Role)
	})
	// Model readiness, like vLLM/SGLang/TRT-LLM's OpenAI servers: validate
	// asks /v1/models (not just /health) and probes with the listed model.
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(modelList{Object: "list", Data: []modelCard{{ID: cfg.Model, Object: "model", OwnedBy: string(cfg.Dialect),
			MaxModelLen: int(e.window.Load())}}})
	})
	if cfg.ExportMetrics && cfg.Dialect != TRTLLM {
		mux.HandleFunc("GET /metrics", e.serveMetrics)
	}
	mux.HandleFunc("POST /admin/inject", e.serveInject)
	mux.HandleFunc("POST /admin/finish-reason", e.serveFinishReason)
	mux.HandleFunc("GET /admin/records", e.serveRecords)
	mux.HandleFunc("POST /v1/completions", e.serveInference)
	mux.HandleFunc("POST /v1/chat/completions", e.serveInference)
	e.registerSurface(mux)
	e.registerServerInfo(mux)
	e.srv = &http.Server{Handler: e.recordSide(mux), ReadHeaderTimeout: 5 * time.Second}
	if err := e.startKV(mux); err != nil {
		ln.Close()
		return nil, err
	}

	mooncake := cfg.Dialect == VLLM && cfg.Connector == ConnectorMooncake
	if (cfg.Dialect == SGLang || mooncake) && cfg.Role == Prefill {
		bln, err := net.Listen("tcp", net.JoinHostPort(e.addr.Addr().String(), fmt.Sprint(cfg.BootstrapPort)))
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("pdfake: bootstrap listen: %w", err)
		}
		e.bootPort = uint16(bln.Addr().(*net.TCPAddr).Port)
		bmux := http.NewServeMux()
		bmux.HandleFunc("POST /join", e.serveJoin)
		bmux.HandleFunc("GET /query", e.serveMooncakeQuery)
		bmux.HandleFunc("GET /worker/{rank}", e.serveMooncakeWorker)
		e.boot = &http.Server{Handler: bmux, ReadHeaderTimeout: 5 * time.Second}
		e.serve(e.boot, bln)
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	e.serve(e.srv, ln)
	return e, nil
}

func (e *Engine) serve(s *http.Server, ln net.Listener) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		_ = s.Serve(ln)
	}()
}

// modelList is the OpenAI GET /v1/models answer.
type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
}

// SetMaxModelLen changes the context window /v1/models reports (0: none),
// as an engine restarted with another --max-model-len would.
func (e *Engine) SetMaxModelLen(n int) { e.window.Store(int64(n)) }

// Close stops the engine, releasing every parked request, and waits for its
// goroutines.
func (e *Engine) Close() error {
	e.stopOnce.Do(func() { close(e.stop) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.srv.Shutdown(ctx)
	if e.boot != nil {
		err = errors.Join(err, e.boot.Shutdown(ctx))
	}
	if err != nil {
		_ = e.srv.Close()
		if e.boot != nil {
			_ = e.boot.Close()
		}
	}
	e.wg.Wait()
	e.client.CloseIdleConnections()
	e.closeKV()
	return nil
}

// host is the address peers know this engine by ("" = do not check).
func (e *Engine) host() string {
	if e.cfg.AdvertiseHost != "" {
		return e.cfg.AdvertiseHost
	}
	if e.addr.Addr().IsUnspecified() {
		return ""
	}
	return e.addr.Addr().String()
}

// AddrPort is the engine's HTTP address.
func (e *Engine) AddrPort() netip.AddrPort { return e.addr }

// BootstrapPort is the SGLang or vLLM Mooncake prefill's bootstrap port (0
// for others).
func (e *Engine) BootstrapPort() uint16 { return e.bootPort }

// NixlPort is the side-channel port the engine advertises.
func (e *Engine) NixlPort() uint16 {
	if e.cfg.NixlPort != 0 {
		return e.cfg.NixlPort
	}
	return e.addr.Port()
}

// Endpoint is the engine as a compiled rule endpoint.
func (e *Engine) Endpoint() spec.Endpoint {
	role := spec.RolePrefill
	if e.cfg.Role == Decode {
		role = spec.RoleDecode
	}
	ep := spec.Endpoint{ID: e.addr.String(), Addr: e.addr, Weight: 1, Role: role, NixlPort: e.NixlPort()}
	if e.cfg.Connector != "" {
		ep.PairFacts = map[string]string{spec.FactKVConnector: e.cfg.Connector}
		ep.Labels = e.connectorLabels()
		if e.cfg.Connector == ConnectorMooncake {
			ep.BootstrapPort = e.bootPort
		}
	}
	return ep
}

// Inject makes the next n inference requests fail with f.
func (e *Engine) Inject(f Fault, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := 0; i < n; i++ {
		e.faults = append(e.faults, f)
	}
}

// SetFinishReason makes a TensorRT-LLM context engine answer with this
// finish_reason ("" restores "length"), e.g. "stop" for an early exit.
func (e *Engine) SetFinishReason(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.finish = s
}

// ForgetRecords drops every record kept so far, so a long benchmark with
// large prompts does not hold all of them in memory.
func (e *Engine) ForgetRecords() {
	e.update(func() { e.records = nil })
}

// Records returns a snapshot of every inference request received so far.
func (e *Engine) Records() []Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Record, len(e.records))
	for i, r := range e.records {
		out[i] = *r
		out[i].Header = r.Header.Clone()
	}
	return out
}

// WaitDone waits until n requests were received and every handler has
// returned, and returns the records. It fails when ctx ends first.
func (e *Engine) WaitDone(ctx context.Context, n int) ([]Record, error) {
	for {
		e.mu.Lock()
		ch := e.changed
		ok := len(e.records) >= n
		for _, r := range e.records {
			ok = ok && r.Done
		}
		e.mu.Unlock()
		if ok {
			return e.Records(), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return e.Records(), fmt.Errorf("pdfake %s: waiting for %d finished requests: %w", e.addr, n, ctx.Err())
		}
	}
}

// WaitReceived waits until the engine has received n inference requests
// (finished or not).
func (e *Engine) WaitReceived(ctx context.Context, n int) error {
	for {
		e.mu.Lock()
		ch, ok := e.changed, len(e.records) >= n
		e.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("pdfake %s: waiting for %d requests: %w", e.addr, n, ctx.Err())
		}
	}
}

// update mutates a record under the lock and wakes waiters.
func (e *Engine) update(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f()
	close(e.changed)
	e.changed = make(chan struct{})
}

// nextFault pops the next injected fault.
func (e *Engine) nextFault() Fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.faults) == 0 {
		return FaultNone
	}
	f := e.faults[0]
	e.faults = e.faults[1:]
	return f
}

// readBody reads r's body into one buffer of its declared length (io.ReadAll
// grows one step by step, leaving the earlier buffers — together more than
// the prompt itself — as garbage per leg, which the large-prompt
// benchmark's samples then pay for in GC).
func readBody(r *http.Request) ([]byte, error) {
	n := r.ContentLength
	if n <= 0 || n > 64<<20 {
		return io.ReadAll(r.Body)
	}
	b := make([]byte, n)
	m, err := io.ReadFull(r.Body, b)
	return b[:m], err
}

// serveInference records the request, applies any fault and hands the
// request to the dialect.
func (e *Engine) serveInference(w http.ResponseWriter, r *http.Request) {
	e.running.Add(1)
	defer func() {
		e.running.Add(-1)
		e.finished.Add(1)
	}()
	body, err := readBody(r)
	rec := &Record{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	e.update(func() { e.records = append(e.records, rec) })
	defer e.update(func() { rec.Done = true })
	if err != nil {
		return
	}
	x := &exchange{e: e, w: w, r: r, rec: rec}
	f := e.nextFault()
	e.update(func() { rec.Fault = f })
	if x.applyFault(f) {
		return
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		x.reject(http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	x.req = req
	e.kvPrefilled(req)
	switch e.cfg.Dialect {
	case VLLM:
		x.vllm()
	case SGLang:
		x.sglang()
	case TRTLLM:
		x.trtllm()
	}
}
