package epp

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
)

// Options configure the EPP server. Build them with DefaultOptions and
// override fields; the daemon embeds this struct rather than re-listing it
// (the yaml names are the daemon's flag names).
type Options struct {
	// Addr is the ext_proc gRPC listen address (GIE convention :9002).
	Addr string `yaml:"epp-addr"`
	// HealthAddr is the gRPC health listen address (GIE convention :9003).
	HealthAddr string `yaml:"epp-health-addr"`
	// MaxBodyBytes caps the request body the EPP buffers to pick; a larger body
	// is refused with 413 before it is all read.
	MaxBodyBytes int64 `yaml:"epp-max-body-bytes"`
	// BodyBudgetBytes bounds the request bodies all streams hold at once
	// (MaxBodyBytes bounds one), and their request headers and subset
	// hints: a stream whose body or headers would take the sum past it is
	// answered 429 (body_memory_exhausted) and what it sent dropped. A
	// body counts from its first byte until the proxy's first
	// response-path message is answered or the stream ends; headers and
	// hint until the stream ends. At least MaxBodyBytes + HeaderRoom, so
	// that a body at the limit and its headers fit on an idle server.
	BodyBudgetBytes int64 `yaml:"epp-body-budget-bytes"`
	// MaxStreams caps the ext_proc streams open at once over all
	// connections (0: no cap). A stream beyond it is answered 429
	// (too_many_streams) as soon as it opens, before anything of it is
	// read, so it costs no body and no pick.
	MaxStreams int `yaml:"epp-max-streams"`
	// DestinationNamespace is the dynamic-metadata namespace of the pick and of
	// the served-endpoint report (GIE default envoy.lb).
	DestinationNamespace string `yaml:"epp-destination-namespace"`
	// SubsetNamespace is the filter-metadata namespace of the proxy's subset
	// hint (GIE default envoy.lb.subset_hint).
	SubsetNamespace string `yaml:"epp-subset-namespace"`
	// MaxEndpoints caps the endpoints sent per pick (0: all the picker
	// returns). Stock Envoy routing on the header with an ORIGINAL_DST cluster
	// reads one address, not a list: set 1 there.
	MaxEndpoints int `yaml:"epp-max-endpoints"`
	// RefusalReasonHeader names the response header carrying the reason of a
	// 429/503/413 the EPP answers itself.
	RefusalReasonHeader string `yaml:"epp-refusal-reason-header"`
	// DrainTimeout bounds graceful shutdown: in-flight streams get this long to
	// finish before they are cut.
	DrainTimeout time.Duration `yaml:"epp-drain-timeout"`
	// StreamWorkers is how many long-lived goroutines serve streams (0: a new
	// goroutine per stream). A pick runs deep (the ladder, the tokenizer):
	// on a fresh goroutine its stack is grown and copied on every stream,
	// on a worker once. A stream arriving while every worker is busy gets a
	// goroutine of its own, as with 0.
	StreamWorkers int `yaml:"epp-stream-workers"`
	// Transport tunes the gRPC server the streams arrive on.
	Transport Transport `yaml:",inline"`
}

// Transport is the ext_proc server's gRPC transport: flow control, buffer
// sizes and the per-connection stream cap. A zero field leaves gRPC's own
// default. DefaultOptions fixes the windows and leaves the rest to gRPC:
// its 32 KiB buffers already take a whole 8 KB exchange per read and per
// write, a stream cap would queue requests at the proxy in front of the
// EPP's own flow control, and gRPC already shares write buffers between
// idle connections. Measured in docs/epp.md ("Transport").
type Transport struct {
	// StreamWindow is each stream's inbound flow-control window in bytes;
	// ConnWindow is the connection's. Set both (gRPC's dynamic windows,
	// which grow by bandwidth-delay pings, are then off) or neither (0 for
	// both keeps the dynamic windows): gRPC fixes both when either is set,
	// the other at 64 KiB, so Validate refuses one alone. gRPC ignores
	// values below 64 KiB, and Validate refuses them.
	StreamWindow int32 `yaml:"epp-stream-window"`
	ConnWindow   int32 `yaml:"epp-conn-window"`
	// WriteBuffer and ReadBuffer are the connection's buffers in bytes
	// (how much of what the streams send is batched into one write, and
	// how much one read takes). 0: gRPC's 32 KiB; negative: none.
	WriteBuffer int `yaml:"epp-write-buffer"`
	ReadBuffer  int `yaml:"epp-read-buffer"`
	// MaxConcurrentStreams caps the streams one proxy connection may have
	// open at once (0: no cap). A proxy that reaches it queues new streams
	// rather than failing them.
	MaxConcurrentStreams uint32 `yaml:"epp-max-concurrent-streams"`
}

// Defaults. The body cap leaves room for agentic prompts (hundreds of KB) and
// long-context requests while bounding what one stream can pin in memory.
const (
	DefaultAddr         = ":9002"
	DefaultHealthAddr   = ":9003"
	DefaultMaxBodyBytes = 32 << 20
	// HeaderRoom is what the body budget must hold beyond one body at
	// MaxBodyBytes: the headers and subset hint charged beside it (Envoy
	// sends 60 KiB of headers at most by default). Without it a body at
	// the limit would be refused 429 on an idle server, every time.
	HeaderRoom = 1 << 20
	// DefaultBodyBudgetBytes is sixteen bodies at DefaultMaxBodyBytes, or
	// about five thousand 100 KB agentic prompts being picked at once.
	DefaultBodyBudgetBytes = 512 << 20
	// DefaultMaxStreams allows a gateway's in-flight requests (a stream
	// stays open through its response) for a pool of tens of engines of a
	// few hundred concurrent sequences each, while bounding in number what
	// streams cost beyond their bodies: a goroutine, gRPC's per-stream
	// buffers and what gRPC has received and not handed over (up to a
	// stream window, or the message being read; docs/epp.md, "Memory and
	// stream bounds"). What that comes to in bytes has not been measured.
	DefaultMaxStreams           = 4096
	DefaultDestinationNamespace = "envoy.lb"
	DefaultSubsetNamespace      = "envoy.lb.subset_hint"
	DefaultRefusalReasonHeader  = "x-infergate-request-dropped-reason"
	DefaultDrainTimeout         = 10 * time.Second
	DefaultStreamWorkers        = 64
	// DefaultStreamWindow and DefaultConnWindow fix the ext_proc server's
	// receive windows. Dynamic windows (gRPC's default) probe every round
	// trip that carries data with a bandwidth-delay ping, and a one-request
	// stream is one such round trip: side by side at one stream at a time,
	// fixed windows took 0.65 reads and 0.2 writes per pick off the EPP
	// (9.6 → 8.9, 5.05 → 4.85) and its p99 from 1.8–2.6 ms to 1.1–1.5 ms
	// (docs/epp.md, seventh pass). 1 MiB per stream lets a typical chat
	// body (tens to hundreds of KB) arrive without a window update; the
	// connection's 16 MiB covers sixteen such streams at once. Neither is
	// memory reserved up front: they bound what a proxy may send ahead.
	DefaultStreamWindow = 1 << 20
	DefaultConnWindow   = 16 << 20
)

// DefaultOptions returns the options a GIE-conformant deployment expects.
func DefaultOptions() Options {
	return Options{
		Addr:                 DefaultAddr,
		HealthAddr:           DefaultHealthAddr,
		MaxBodyBytes:         DefaultMaxBodyBytes,
		BodyBudgetBytes:      DefaultBodyBudgetBytes,
		MaxStreams:           DefaultMaxStreams,
		DestinationNamespace: DefaultDestinationNamespace,
		SubsetNamespace:      DefaultSubsetNamespace,
		RefusalReasonHeader:  DefaultRefusalReasonHeader,
		DrainTimeout:         DefaultDrainTimeout,
		StreamWorkers:        DefaultStreamWorkers,
		Transport: Transport{
			StreamWindow: DefaultStreamWindow,
			ConnWindow:   DefaultConnWindow,
		},
	}
}

// Validate reports the first option that cannot work, naming its field.
func (o Options) Validate() error {
	switch {
	case o.Addr == "":
		return errors.New("epp: addr: must not be empty")
	case o.HealthAddr == "":
		return errors.New("epp: health_addr: must not be empty")
	case o.Addr == o.HealthAddr:
		return fmt.Errorf("epp: health_addr: %q is also the ext_proc address", o.HealthAddr)
	case o.MaxBodyBytes <= 0:
		return fmt.Errorf("epp: max_body_bytes: %d must be positive", o.MaxBodyBytes)
	case o.BodyBudgetBytes < o.MaxBodyBytes+HeaderRoom:
		return fmt.Errorf("epp: body_budget_bytes: %d is below max_body_bytes %d + %d for its headers: a body at the limit could never be taken", o.BodyBudgetBytes, o.MaxBodyBytes, int64(HeaderRoom))
	case o.MaxStreams < 0:
		return fmt.Errorf("epp: max_streams: %d must not be negative (0: no cap)", o.MaxStreams)
	case o.DestinationNamespace == "" || !utf8.ValidString(o.DestinationNamespace):
		return fmt.Errorf("epp: destination_namespace: %q must be non-empty UTF-8 (a protobuf string)", o.DestinationNamespace)
	case o.SubsetNamespace == "" || !utf8.ValidString(o.SubsetNamespace):
		return fmt.Errorf("epp: subset_namespace: %q must be non-empty UTF-8 (a protobuf string)", o.SubsetNamespace)
	case o.RefusalReasonHeader == "" || o.RefusalReasonHeader != strings.ToLower(o.RefusalReasonHeader):
		return fmt.Errorf("epp: refusal_reason_header: %q must be a non-empty lower-case header name", o.RefusalReasonHeader)
	case o.MaxEndpoints < 0:
		return fmt.Errorf("epp: max_endpoints: %d must not be negative", o.MaxEndpoints)
	case o.DrainTimeout < 0:
		return fmt.Errorf("epp: drain_timeout: %s must not be negative", o.DrainTimeout)
	case o.StreamWorkers < 0:
		return fmt.Errorf("epp: stream_workers: %d must not be negative", o.StreamWorkers)
	}
	return o.Transport.validate()
}

// minWindow is HTTP/2's initial window, below which gRPC ignores a window.
const minWindow = 64 << 10

func (t Transport) validate() error {
	switch {
	case t.StreamWindow != 0 && t.StreamWindow < minWindow:
		return fmt.Errorf("epp: stream_window: %d is below HTTP/2's %d (0: dynamic)", t.StreamWindow, minWindow)
	case t.ConnWindow != 0 && t.ConnWindow < minWindow:
		return fmt.Errorf("epp: conn_window: %d is below HTTP/2's %d (0: dynamic)", t.ConnWindow, minWindow)
	// gRPC fixes both windows when either is set, leaving the other at
	// 64 KiB: a 1 MiB stream window behind a 64 KiB connection window.
	case t.StreamWindow != 0 && t.ConnWindow == 0:
		return fmt.Errorf("epp: conn_window: 0 (dynamic) with stream_window %d would be fixed at 64 KiB: set both or neither", t.StreamWindow)
	case t.ConnWindow != 0 && t.StreamWindow == 0:
		return fmt.Errorf("epp: stream_window: 0 (dynamic) with conn_window %d would be fixed at 64 KiB: set both or neither", t.ConnWindow)
	}
	return nil
}

// serverOptions are the gRPC server options t asks for; a zero field adds
// none, so gRPC's default stands.
func (t Transport) serverOptions() []grpc.ServerOption {
	var o []grpc.ServerOption
	if t.StreamWindow != 0 {
		o = append(o, grpc.InitialWindowSize(t.StreamWindow))
	}
	if t.ConnWindow != 0 {
		o = append(o, grpc.InitialConnWindowSize(t.ConnWindow))
	}
	if t.WriteBuffer != 0 {
		o = append(o, grpc.WriteBufferSize(max(t.WriteBuffer, 0)))
	}
	if t.ReadBuffer != 0 {
		o = append(o, grpc.ReadBufferSize(max(t.ReadBuffer, 0)))
	}
	if t.MaxConcurrentStreams != 0 {
		o = append(o, grpc.MaxConcurrentStreams(t.MaxConcurrentStreams))
	}
	return o
}
