package extprocclient

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The messages a proxy sends, one builder each, so Exchange and a test that
// drives the stream message by message (test/eppconformance) send the same.

// HeaderMap is hs as ext_proc carries it (values in raw_value, as Envoy).
func HeaderMap(hs []Header) *corev3.HeaderMap {
	m := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, len(hs))}
	for i, h := range hs {
		m.Headers[i] = &corev3.HeaderValue{Key: h.Key, RawValue: []byte(h.Value)}
	}
	return m
}

// RequestHeadersMessage is the first message of a stream: the request
// headers (eos: no body follows) with the processing modes an EPP expects.
func RequestHeadersMessage(hs []Header, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: HeaderMap(hs), EndOfStream: eos,
		}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	}
}

// RequestBodyMessage is one request body chunk; eos ends the request.
func RequestBodyMessage(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos},
	}}
}

// ResponseHeadersMessage is the upstream's response headers: its status
// (then extra), and the endpoint that served it in envoy.lb metadata (""
// for none); eos when no body follows.
func ResponseHeadersMessage(status int, served string, eos bool, extra ...Header) *extprocv3.ProcessingRequest {
	hs := append([]Header{{Key: ":status", Value: strconv.Itoa(status)}}, extra...)
	m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: HeaderMap(hs), EndOfStream: eos,
	}}}
	if served != "" {
		m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			NamespaceDestination: {Fields: map[string]*structpb.Value{KeyServed: structpb.NewStringValue(served)}},
		}}
	}
	return m
}

// ResponseBodyMessage is one response body chunk; eos ends the response.
func ResponseBodyMessage(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos},
	}}
}

// Chunks slices b the way a proxy hands a body over: slices of at most size
// (0: DefaultChunk); an empty body is no chunk.
func Chunks(b []byte, size int) [][]byte {
	if size <= 0 {
		size = DefaultChunk
	}
	var out [][]byte
	for len(b) > 0 {
		n := min(size, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}
