// Package extprocclient is the proxy side of an endpoint picker's ext_proc
// stream, reduced to what the benchmarks and the test data plane need: send
// a request's headers and body the way Envoy does in FULL_DUPLEX_STREAMED
// mode, read the pick (or the picker's immediate response), then report the
// response path (status and served endpoint) so the picker can settle what
// it holds. It checks what it relies on (the pick comes first, the body
// chunks come back in order) and nothing else; the protocol's full
// black-box checks are test/eppconformance's.
//
// The names on the wire are the Gateway API Inference Extension's; they are
// repeated here rather than imported from package epp, so the client stays a
// client of any EPP.
package extprocclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Names on the wire (GIE endpoint-picker protocol v1).
const (
	HeaderDestination    = "x-gateway-destination-endpoint"
	KeyServed            = "x-gateway-destination-endpoint-served"
	NamespaceDestination = "envoy.lb"
)

// DefaultChunk is the size Envoy hands request bodies over in (a buffer's
// worth); a body is sent in slices of at most this.
const DefaultChunk = 16 << 10

// Dial opens a plaintext gRPC connection to an EPP.
func Dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Header is one request header as the proxy presents it (lower-case name;
// pseudo-headers such as ":path" included).
type Header struct{ Key, Value string }

// Headers builds a header list from name, value pairs, in order.
func Headers(kv ...string) []Header {
	out := make([]Header, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Header{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// Request is one HTTP request as the proxy presents it to the EPP.
type Request struct {
	Headers []Header
	Body    []byte
	Chunk   int // body slice size; 0 = DefaultChunk
}

// Pick is the EPP's answer to the request phase.
type Pick struct {
	// Endpoints is the destination list ("ip:port", primary first); empty
	// when the EPP answered with an immediate response.
	Endpoints []string
	// Metadata is the same list as the envoy.lb dynamic metadata carried it.
	Metadata string
	// Headers are the request headers the EPP set (destination included),
	// or the immediate response's headers when it refused.
	Headers map[string]string
	// Status and Reason are the immediate response's, when the EPP refused
	// (Status 0 otherwise). Reason is the body's first line.
	Status int
	Reason string
	// Body is the request body as the EPP streamed it back (what Envoy
	// forwards in FULL_DUPLEX_STREAMED mode), nil when its answers carried
	// no streamed body.
	Body []byte
}

// Exchange is one ext_proc stream: one request and its response. It is used
// from one goroutine.
type Exchange struct {
	s      extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	chunks int  // request body chunks the EPP owes back
	closed bool // the EPP ended the exchange (immediate response)
}

// Start opens a stream and sends the request phase: the headers (with the
// processing modes the EPP expects) and the body in slices, the last one
// ending the stream. The pick is read by Pick.
func Start(ctx context.Context, cc grpc.ClientConnInterface, r Request) (*Exchange, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open stream: %w", err)
	}
	x := &Exchange{s: s, cancel: cancel}
	if err := s.Send(RequestHeadersMessage(r.Headers, len(r.Body) == 0)); err != nil {
		x.Close()
		return nil, fmt.Errorf("send headers: %w", err)
	}
	cs := Chunks(r.Body, r.Chunk)
	for i, c := range cs {
		if err := s.Send(RequestBodyMessage(c, i == len(cs)-1)); err != nil {
			x.Close()
			return nil, fmt.Errorf("send body: %w", err)
		}
		x.chunks++
	}
	return x, nil
}

// Pick reads the EPP's answer to the request phase: the destination (then
// the re-emitted body chunks, which it reads and drops) or an immediate
// response, after which the exchange is over.
func (x *Exchange) Pick() (Pick, error) {
	r, err := x.s.Recv()
	if err != nil {
		return Pick{}, fmt.Errorf("receive pick: %w", err)
	}
	p, err := FirstAnswer(r)
	if err != nil {
		return Pick{}, err
	}
	if r.GetImmediateResponse() != nil {
		x.closed = true
		return p, nil
	}
	if err := x.readBody(&p); err != nil {
		return Pick{}, err
	}
	if len(p.Endpoints) == 0 {
		return Pick{}, errors.New("pick without a destination header")
	}
	return p, nil
}

// FirstAnswer reads the EPP's first answer to the request phase: the pick
// (destination, metadata and the headers set; Body is left to the answers
// that follow) or an immediate response. Exchange.Pick and a driver that
// speaks the transport itself (test/bench/eppload's lean driver) read it
// alike.
func FirstAnswer(r *extprocv3.ProcessingResponse) (Pick, error) {
	if ir := r.GetImmediateResponse(); ir != nil {
		reason, _, _ := strings.Cut(string(ir.GetBody()), "\n")
		return Pick{Status: int(ir.GetStatus().GetCode()), Reason: reason, Headers: setHeaders(ir.GetHeaders())}, nil
	}
	hr := r.GetRequestHeaders()
	if hr == nil {
		return Pick{}, fmt.Errorf("first answer is %T, not the request headers", r.GetResponse())
	}
	p := Pick{Headers: setHeaders(hr.GetResponse().GetHeaderMutation())}
	if d := p.Headers[HeaderDestination]; d != "" {
		p.Endpoints = strings.Split(d, ",")
	}
	p.Metadata = r.GetDynamicMetadata().GetFields()[NamespaceDestination].GetStructValue().GetFields()[HeaderDestination].GetStringValue()
	return p, nil
}

// readBody reads the EPP's answers to the request body. A streamed answer
// need not mirror the chunks sent: an EPP that buffers the body re-chunks it
// in slices of its own size (the GIE EPPs in 62,000-byte slices), so once
// an answer carries a streamed body, answers are read until one ends the
// stream; answers without one are counted against the chunks sent.
func (x *Exchange) readBody(p *Pick) error {
	for pending := x.chunks > 0; pending; {
		r, err := x.s.Recv()
		if err != nil {
			return fmt.Errorf("receive body chunk: %w", err)
		}
		rb := r.GetRequestBody()
		if rb == nil {
			return fmt.Errorf("body chunk answered with %T", r.GetResponse())
		}
		x.chunks--
		if sr := rb.GetResponse().GetBodyMutation().GetStreamedResponse(); sr != nil {
			p.Body = append(p.Body, sr.GetBody()...)
			pending = !sr.GetEndOfStream()
		} else {
			pending = x.chunks > 0
		}
	}
	x.chunks = 0
	return nil
}

// setHeaders are the headers a mutation sets, by name.
func setHeaders(m *extprocv3.HeaderMutation) map[string]string {
	out := map[string]string{}
	for _, h := range m.GetSetHeaders() {
		v := string(h.GetHeader().GetRawValue())
		if v == "" {
			v = h.GetHeader().GetValue()
		}
		out[h.GetHeader().GetKey()] = v
	}
	return out
}

// Respond reports the response path as a GIE-aware proxy does: the response
// headers with the served endpoint in envoy.lb metadata ("" for none), then
// the body chunks (none: the headers end the response), reading the EPP's
// answer to each. Call Finish afterwards.
func (x *Exchange) Respond(status int, served string, body ...[]byte) error {
	if err := x.ResponseHeaders(status, served, len(body) > 0); err != nil {
		return err
	}
	for i, b := range body {
		if err := x.ResponseBody(b, i == len(body)-1); err != nil {
			return err
		}
	}
	return nil
}

// ResponseHeaders reports the upstream's response headers: its status (then
// extra, such as its content-type) and the endpoint that served it (""
// for none). more says a body follows (ResponseBody), else the headers end
// the response.
func (x *Exchange) ResponseHeaders(status int, served string, more bool, extra ...Header) error {
	h := ResponseHeadersMessage(status, served, !more, extra...)
	if err := x.roundTrip(h); err != nil {
		return fmt.Errorf("response headers: %w", err)
	}
	return nil
}

// ResponseBody reports one response body chunk; eos ends the response. A
// data plane that does not mirror the body may send just an empty final
// chunk, so the EPP learns when the response ended.
func (x *Exchange) ResponseBody(b []byte, eos bool) error {
	msg := ResponseBodyMessage(b, eos)
	if err := x.roundTrip(msg); err != nil {
		return fmt.Errorf("response body: %w", err)
	}
	return nil
}

func (x *Exchange) roundTrip(m *extprocv3.ProcessingRequest) error {
	if err := x.s.Send(m); err != nil {
		return err
	}
	_, err := x.s.Recv()
	return err
}

// Finish half-closes the stream and waits for the EPP to end it (it settles
// the pick then), reporting a non-OK end as an error.
func (x *Exchange) Finish() error {
	defer x.cancel()
	if err := x.s.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := x.s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// Close abandons the stream (a client that went away).
func (x *Exchange) Close() { x.cancel() }

// Closed reports whether the EPP ended the exchange with an immediate
// response.
func (x *Exchange) Closed() bool { return x.closed }
