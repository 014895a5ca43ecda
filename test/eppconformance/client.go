package eppconformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/infergate/infergate/test/extprocclient"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names the suite puts on or expects from the wire (GIE proposal 004);
// the ones a proxy sends are extprocclient's.
const (
	headerDestination     = extprocclient.HeaderDestination
	keySubset             = "x-gateway-destination-endpoint-subset"
	namespaceDestination  = extprocclient.NamespaceDestination
	namespaceSubsetHint   = "envoy.lb.subset_hint"
	defaultConcurrency    = 1000
	defaultMaxBodyForTest = 4 << 20
)

// request describes one HTTP request as Envoy would present it.
type request struct {
	headers  map[string]string
	body     []byte
	chunk    int       // body chunk size; 0 = extprocclient.DefaultChunk
	subset   *[]string // nil: no hint
	trailers bool      // end the body with trailers instead of end_of_stream
	badHint  bool      // send the subset hint as a string instead of a list
}

// headerList is kv as a header list (in map order: the EPP must not care).
func headerList(kv map[string]string) []extprocclient.Header {
	hs := make([]extprocclient.Header, 0, len(kv))
	for k, v := range kv {
		hs = append(hs, extprocclient.Header{Key: k, Value: v})
	}
	return hs
}

// messages renders the request-phase messages, protocol_config on the first
// as Envoy sends it.
func (r request) messages() []*extprocv3.ProcessingRequest {
	hs := map[string]string{":method": "POST", ":path": "/v1/chat/completions", ":authority": "conformance.local", ":scheme": "http", "content-type": "application/json"}
	for k, v := range r.headers {
		hs[k] = v
	}
	noBody := len(r.body) == 0 && !r.trailers
	first := extprocclient.RequestHeadersMessage(headerList(hs), noBody)
	switch {
	case r.badHint:
		first.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			namespaceSubsetHint: {Fields: map[string]*structpb.Value{keySubset: structpb.NewStringValue("10.0.0.1:8000")}},
		}}
	case r.subset != nil:
		vals := make([]*structpb.Value, 0, len(*r.subset))
		for _, s := range *r.subset {
			vals = append(vals, structpb.NewStringValue(s))
		}
		first.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			namespaceSubsetHint: {Fields: map[string]*structpb.Value{keySubset: structpb.NewListValue(&structpb.ListValue{Values: vals})}},
		}}
	}
	msgs := []*extprocv3.ProcessingRequest{first}
	if noBody {
		return msgs
	}
	for _, c := range chunks(r.body, r.chunk) {
		msgs = append(msgs, extprocclient.RequestBodyMessage(c, false))
	}
	if r.trailers {
		msgs = append(msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{Trailers: extprocclient.HeaderMap(extprocclient.Headers("x-trailer", "1"))},
		}})
	} else {
		msgs[len(msgs)-1].GetRequestBody().EndOfStream = true
	}
	return msgs
}

// chunks slices b like a proxy would; an empty body is one empty chunk
// (the end of a body that ends in trailers).
func chunks(b []byte, size int) [][]byte {
	if len(b) == 0 {
		return [][]byte{{}}
	}
	return extprocclient.Chunks(b, size)
}

// responseMessages renders the response path: headers carrying the served
// endpoint in metadata (and, when served is empty, nothing), then the body.
func responseMessages(served string, status int, body [][]byte) []*extprocv3.ProcessingRequest {
	msgs := []*extprocv3.ProcessingRequest{extprocclient.ResponseHeadersMessage(status, served, len(body) == 0,
		extprocclient.Header{Key: "content-type", Value: "text/event-stream"})}
	for i, b := range body {
		msgs = append(msgs, extprocclient.ResponseBodyMessage(b, i == len(body)-1))
	}
	return msgs
}

// stream is one ext_proc stream driven like Envoy: sends run on their own
// goroutine so the EPP's answers are read while the body is still going out.
type stream struct {
	s    extprocv3.ExternalProcessor_ProcessClient
	sent chan error
}

func open(ctx context.Context, cc *grpc.ClientConn) (*stream, error) {
	s, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx)
	if err != nil {
		return nil, fmt.Errorf("open ext_proc stream: %w", err)
	}
	return &stream{s: s}, nil
}

// sendAsync sends msgs in order (and half-closes when closeSend) on a
// goroutine; wait for it with sendDone.
func (st *stream) sendAsync(msgs []*extprocv3.ProcessingRequest, closeSend bool) {
	st.sent = make(chan error, 1)
	go func() {
		for _, m := range msgs {
			if err := st.s.Send(m); err != nil {
				// io.EOF: the EPP ended the stream early (e.g. an immediate
				// response); its status comes from Recv.
				st.sent <- err
				return
			}
		}
		if closeSend {
			st.sent <- st.s.CloseSend()
			return
		}
		st.sent <- nil
	}()
}

func (st *stream) sendDone() error {
	err := <-st.sent
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// recv returns the next answer; io.EOF when the EPP ended the stream with OK.
func (st *stream) recv() (*extprocv3.ProcessingResponse, error) { return st.s.Recv() }

// recvAll reads answers until the stream ends; the error is nil for an OK end.
func (st *stream) recvAll() ([]*extprocv3.ProcessingResponse, error) {
	var out []*extprocv3.ProcessingResponse
	for {
		r, err := st.s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

// pick is a decoded request-headers answer.
type pick struct {
	endpoints []string
}

func headerOptValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// decodePick checks one request-headers answer against the protocol and
// returns its endpoints.
func decodePick(r *extprocv3.ProcessingResponse, pool []string) (pick, error) {
	hr := r.GetRequestHeaders()
	if hr == nil {
		if ir := r.GetImmediateResponse(); ir != nil {
			return pick{}, fmt.Errorf("want the request-headers answer with a pick, got ImmediateResponse %d (%s)", ir.GetStatus().GetCode(), ir.GetBody())
		}
		return pick{}, fmt.Errorf("want the request-headers answer first, got %T", r.GetResponse())
	}
	common := hr.GetResponse()
	if !common.GetClearRouteCache() {
		return pick{}, errors.New("clear_route_cache not set: header-based routing would not see the pick")
	}
	var hdr []string
	for _, o := range common.GetHeaderMutation().GetSetHeaders() {
		if strings.EqualFold(o.GetHeader().GetKey(), headerDestination) {
			hdr = append(hdr, headerOptValue(o.GetHeader()))
		}
	}
	if len(hdr) != 1 {
		return pick{}, fmt.Errorf("want exactly one %s header, got %q", headerDestination, hdr)
	}
	ns := r.GetDynamicMetadata().GetFields()[namespaceDestination].GetStructValue()
	md := ns.GetFields()[headerDestination].GetStringValue()
	if md != hdr[0] {
		return pick{}, fmt.Errorf("header %s=%q and metadata %s/%s=%q disagree", headerDestination, hdr[0], namespaceDestination, headerDestination, md)
	}
	var p pick
	for _, e := range strings.Split(hdr[0], ",") {
		e = strings.TrimSpace(e)
		host, port, err := net.SplitHostPort(e)
		if err != nil || net.ParseIP(host) == nil {
			return pick{}, fmt.Errorf("endpoint %q is not ip:port", e)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return pick{}, fmt.Errorf("endpoint %q has a bad port", e)
		}
		if len(pool) > 0 && !contains(pool, e) {
			return pick{}, fmt.Errorf("endpoint %q is not in the pool %q", e, pool)
		}
		p.endpoints = append(p.endpoints, e)
	}
	return p, nil
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
