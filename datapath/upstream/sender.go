package upstream

import (
	"context"
	"net/http"
	"time"

	"github.com/infergate/infergate/datapath/sockio"
	"github.com/infergate/infergate/spec"
)

// Sender delivers one request to an engine. It is the one seam between
// infergate and its engines: the single-pool proxy and every P/D dialect
// send through it, and nothing above it knows about connections, pools or
// TLS.
//
// A returned error for which NotSent reports true means the engine provably
// never received the request, so it may be sent elsewhere; any other error
// means it may have (LLM requests are not idempotent: never replay those).
// The caller reads the response body to its end or closes it.
type Sender interface {
	Send(ctx context.Context, leg Leg) (*http.Response, error)
}

// Leg is one request to an engine. It is passed by value: a Sender may
// change its copy (WithTLS does) without the caller seeing it.
type Leg struct {
	// Endpoint is dialed at Endpoint.ID ("ip:port"), which is also the Host.
	Endpoint spec.Endpoint
	// Method is the request method; "" is POST (every P/D leg).
	Method string
	// Path is the request target: the path and an optional query
	// ("/v1/completions", "/v1/models?x=1"); "" is "/".
	Path string
	// Header holds the end-to-end fields; Host, Content-Length and
	// Transfer-Encoding are the Sender's and ignored here.
	Header http.Header
	// List, when its Names are not nil, is Header again as a list, with
	// its own two fields over it (which Header may lack), and the Client
	// writes it instead of ranging over Header. Whoever changes Header
	// after setting it must put those into it (SetInto) and clear List
	// (tracing's propagation does); so does the Client with a head too
	// long for its buffer.
	List HeadList
	// Body is sent with its Content-Length (0 for a nil body on POST, PUT
	// and PATCH). Ignored when Stream is set.
	Body []byte
	// Stream, when set, is a client body copied through as it arrives.
	Stream *BodyStream
	// TLS is the rule's TLS to its engines (security 2); nil is plaintext.
	TLS *TLS
	// HeaderWait > 0 bounds, all together, waiting for a free connection
	// at the endpoint's cap (a *PoolWaitError, TimedOut), writing the
	// request and waiting for the response head (every such error matches
	// os.ErrDeadlineExceeded); 0 leaves it to ctx.
	HeaderWait time.Duration
	// From, when not sockio.NoDeadline, is the moment HeaderWait counts
	// from, a clock reading the caller already took no longer before Send
	// than its own CPU time (the datapath's request start for a request
	// that arrived whole); NoDeadline: Send reads the clock. Why: one clock
	// reading and its arithmetic were ~150 instructions of a small
	// request's Send. A Mono, as the deadlines counted from it are: the
	// caller converts the reading once for Send and its own deadlines.
	From sockio.Mono
	// Into, when not nil, receives the response headers and becomes
	// resp.Header: the proxy passes the client's header map so the
	// engine's headers are parsed straight into it instead of into a map
	// copied over afterwards. It must be empty or hold only X-Request-Id,
	// which the engine's value never replaces; on error (and for each 1xx
	// response) it is put back to exactly that.
	Into http.Header
	// Fields, with Into set, asks for the engine's fields as name, value
	// pairs (Fields) instead of in Into, for a client writer that takes
	// them so (the h1 front end's head fields): Into then stays the
	// client's id alone. A head that needs the map (a hop-by-hop field,
	// Content-Lengths to compare) still goes into Into. Why: the fields
	// went into the map only to be walked back out of it for the
	// client's head, and the map cleared for the next request.
	Fields bool
}

// HeadList is a leg's header as its caller already had it in order: a
// front end's parsed fields, the i-th named Names[byte i of Codes - 1]
// (Codes ends at its first zero byte: up to 8 fields) with the value
// Values[i], each name once and spelled as Header's key; and the
// gateway's own two fields over them. It must say exactly what Header
// with those put into it (SetInto) says, up to the order of names: Header
// holds the listed fields, and X-Request-Id and X-Forwarded-For, when
// set here, have these values alone, whether or not Header holds them
// yet. Why: ranging over a map draws a random start and steps an
// iterator per field, where the front end had the fields in a list
// already (h1.HeadList); and a field the caller adds need not be
// inserted into the map only to be written from the list.
type HeadList struct {
	Names  []string
	Codes  uint64
	Values []string
	// RequestID and ForwardedFor are the X-Request-Id and X-Forwarded-For
	// values the caller sets, each replacing any listed field of its
	// name; "" sets none. Why these two by name, not any two fields: the
	// writer appends each name with its colon as one constant, and tells
	// a listed name from them by constant compares (a Field pair was
	// ~100 instructions more a request: its loop, memequal, a colon).
	RequestID, ForwardedFor string
}

// SetInto puts l's RequestID and ForwardedFor into h, for a Sender that
// drops the list and writes the head from h (Header may lack them).
func (l *HeadList) SetInto(h http.Header) {
	if l.RequestID != "" {
		h[headerRequestID] = []string{l.RequestID}
	}
	if l.ForwardedFor != "" {
		h[headerForwardedFor] = []string{l.ForwardedFor}
	}
}

// replaced reports whether a listed field named k is one l sets, or one
// the Sender writes itself (Host, Content-Length, Transfer-Encoding).
func (l *HeadList) replaced(k string) bool {
	switch k {
	case headerContentLength, headerHost, headerTE:
		return true
	case headerRequestID:
		return l.RequestID != ""
	case headerForwardedFor:
		return l.ForwardedFor != ""
	}
	return false
}

func (l *Leg) method() string {
	if l.Method == "" {
		return http.MethodPost
	}
	return l.Method
}

// BoundedBody is implemented by response bodies whose reads the caller may
// bound with a deadline (the relay's idle timeouts) instead of a timer. A
// Sender's bodies need not implement it; the relay then relies on ctx.
type BoundedBody interface {
	// Buffered reports whether the rest of the body is in memory already,
	// so no read can block and no deadline is needed.
	Buffered() bool
	// SetReadDeadline bounds the next reads; a read past it fails with an
	// error matching os.ErrDeadlineExceeded.
	SetReadDeadline(t time.Time)
}

// WithTLS returns s sending every leg over t (nil: s itself). The P/D
// dialects get a rule's engine TLS this way without knowing about it.
func WithTLS(s Sender, t *TLS) Sender {
	if t == nil {
		return s
	}
	return tlsSender{s: s, t: t}
}

type tlsSender struct {
	s Sender
	t *TLS
}

func (x tlsSender) Send(ctx context.Context, leg Leg) (*http.Response, error) {
	leg.TLS = x.t
	return x.s.Send(ctx, leg)
}

// Wire names the Client writes or parses.
const (
	headerConnection    = "Connection"
	headerContentType   = "Content-Type"
	headerContentLength = "Content-Length"
	headerHost          = "Host"
	headerTE            = "Transfer-Encoding"
	headerRequestID     = "X-Request-Id"
	headerForwardedFor  = "X-Forwarded-For"
)
