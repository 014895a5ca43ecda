package epp

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// fakeStream is a server stream the test drives one message at a time. Recv
// announces itself on recvs before blocking, so the test knows exactly when
// the server has finished with the previous message — no sleeps.
type fakeStream struct {
	grpc.ServerStream
	ctx   context.Context
	in    chan *extprocv3.ProcessingRequest // closed: the proxy half-closed
	recvs chan struct{}

	mu  sync.Mutex
	out []*extprocv3.ProcessingResponse
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) Recv() (*extprocv3.ProcessingRequest, error) {
	f.recvs <- struct{}{}
	select {
	case m, ok := <-f.in:
		if !ok {
			return nil, io.EOF
		}
		return m, nil
	case <-f.ctx.Done():
		return nil, status.FromContextError(f.ctx.Err()).Err()
	}
}

// Send fails, as gRPC's proto codec would, on a message proto cannot
// marshal (a string field that is not UTF-8), so no test passes on an
// answer the real server could not send.
func (f *fakeStream) Send(r *extprocv3.ProcessingResponse) error {
	if _, err := proto.Marshal(r); err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out = append(f.out, r)
	return nil
}

// SendMsg takes the answers the stream encodes by hand, decoded back into
// messages, so every test reads what the proxy would.
func (f *fakeStream) SendMsg(m any) error {
	a, ok := m.(*wireAnswer)
	if !ok {
		return fmt.Errorf("SendMsg(%T): only hand-encoded answers are sent this way", m)
	}
	r := &extprocv3.ProcessingResponse{}
	if err := proto.Unmarshal(append(append([]byte(nil), a.head...), a.tail...), r); err != nil {
		return fmt.Errorf("a hand-encoded answer does not decode: %w", err)
	}
	return f.Send(r)
}

func (f *fakeStream) sent() []*extprocv3.ProcessingResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*extprocv3.ProcessingResponse(nil), f.out...)
}

// driver runs Process on a fake stream and feeds it.
type driver struct {
	t      *testing.T
	f      *fakeStream
	cancel context.CancelFunc
	ready  bool // the server is known to be waiting in Recv
	done   chan error
}

func drive(t *testing.T, s *Server) *driver {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeStream{ctx: ctx, in: make(chan *extprocv3.ProcessingRequest), recvs: make(chan struct{}, 1)}
	d := &driver{t: t, f: f, cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- s.Process(f) }()
	t.Cleanup(cancel)
	return d
}

// feed hands the server one message; it returns once the server took it.
// It reports false when the server ended the stream instead.
func (d *driver) feed(m *extprocv3.ProcessingRequest) bool {
	if !d.ready {
		select {
		case <-d.f.recvs:
		case err := <-d.done:
			d.done <- err
			return false
		}
	}
	d.ready = false
	d.f.in <- m
	return true
}

// idle waits until the server has handled everything fed so far and asks for
// more; false when it ended the stream instead.
func (d *driver) idle() bool {
	if d.ready {
		return true
	}
	select {
	case <-d.f.recvs:
		d.ready = true
		return true
	case err := <-d.done:
		d.done <- err
		return false
	}
}

// end half-closes and returns Process's result.
func (d *driver) end() error {
	if d.idle() {
		close(d.f.in)
	}
	return <-d.done
}

// result returns Process's result without closing (the server ended it).
func (d *driver) result() error { return <-d.done }

// recordingPicker picks a fixed list and records everything it is told.
type recordingPicker struct {
	result Result
	err    error

	mu       sync.Mutex
	requests []Request
	outcomes []Outcome
}

func (p *recordingPicker) Pick(_ context.Context, r *Request) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cp := *r
	cp.Body = append([]byte(nil), r.Body...)
	p.requests = append(p.requests, cp)
	return p.result, p.err
}

func (p *recordingPicker) Served(o Outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outcomes = append(p.outcomes, o)
}

func newTestServer(t *testing.T, p Picker, mutate ...func(*Options)) (*Server, *Metrics) {
	t.Helper()
	opts := DefaultOptions()
	for _, m := range mutate {
		m(&opts)
	}
	m := NewMetrics(prometheus.NewRegistry())
	s, err := New(opts, p, m)
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

func streamsCount(m *Metrics, result string) float64 {
	return counterValue(m.Streams.WithLabelValues(result))
}

// Message builders, shaped as Envoy sends them.

func reqHeaders(kv map[string]string, eos bool) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{}
	for k, v := range kv {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos}},
	}
}

func withConfig(m *extprocv3.ProcessingRequest, reqMode, respMode extprocfilterv3.ProcessingMode_BodySendMode) *extprocv3.ProcessingRequest {
	m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: reqMode, ResponseBodyMode: respMode}
	return m
}

func withSubset(m *extprocv3.ProcessingRequest, subset ...string) *extprocv3.ProcessingRequest {
	vals := make([]*structpb.Value, 0, len(subset))
	for _, s := range subset {
		vals = append(vals, structpb.NewStringValue(s))
	}
	m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		DefaultSubsetNamespace: {Fields: map[string]*structpb.Value{KeySubset: structpb.NewListValue(&structpb.ListValue{Values: vals})}},
	}}
	return m
}

func reqBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}},
	}
}

func reqTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}},
	}
}

func respHeaders(status, served string, eos bool) *extprocv3.ProcessingRequest {
	m := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers:     &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(status)}}},
			EndOfStream: eos,
		}},
	}
	if served != "" {
		m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			DefaultDestinationNamespace: {Fields: map[string]*structpb.Value{KeyServed: structpb.NewStringValue(served)}},
		}}
	}
	return m
}

func respBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}},
	}
}

// setHeaders returns the header mutation of a request-headers answer as a map,
// failing on an append action other than overwrite.
func setHeaders(t *testing.T, r *extprocv3.ProcessingResponse) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
			t.Errorf("header %s: append action %s, want OVERWRITE_IF_EXISTS_OR_ADD", o.GetHeader().GetKey(), o.GetAppendAction())
		}
		out[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	return out
}
