package epp

import (
	"bytes"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// decodeCases are wire messages with whether decodeRequest should take
// them (fast) or leave them to the proto package.
func decodeCases() []struct {
	name string
	wire []byte
	fast bool
} {
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err)
		}
		return b
	}
	envoyHeaders := reqHeaders(map[string]string{
		":method": "POST", ":path": "/v1/chat/completions", ":authority": "gw", "content-type": "application/json",
		"content-length": "8192", "x-request-id": "abc", "x-gateway-inference-objective": "critical",
	}, false)
	valueHeaders := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", Value: "/v1/completions"}, {Key: "x-empty"}, {Key: "raw", RawValue: []byte{0xff, 0xfe}}}},
	}}}
	badKey := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/")}}},
	}}}
	badKeyWire := bytes.Replace(marshal(badKey), []byte(":path"), []byte(":pa\xffh"), 1)
	attrs := reqHeaders(map[string]string{":path": "/"}, true)
	attrs.GetRequestHeaders().Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{"k": structpb.NewStringValue("v")}}}
	withAttrs := reqBody("x", true)
	withAttrs.Attributes = map[string]*structpb.Struct{"a": {}}
	body := reqBody(string(bytes.Repeat([]byte("b"), 8192)), true)
	body.GetRequestBody().GrpcMessageCompressed = true
	body.GetRequestBody().DrainComplete = true
	body.GetRequestBody().EndOfStreamWithoutMessage = true
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{
		Trailers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "grpc-status", RawValue: []byte("0")}}},
	}}}
	respTrailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}
	flow := &extprocv3.ProcessingRequest{FlowControlInit: &extprocv3.ProcessingRequest_FlowControlInit{}}
	// Two request parts: the proto package keeps the last.
	twoParts := append(marshal(reqBody("a", false)), marshal(respBody("b", true))...)
	// The body field twice: the proto package merges the two HttpBody messages.
	twice := append(marshal(reqBody("a", false)), marshal(reqBody("", true))...)
	unknown := protowire.AppendVarint(protowire.AppendTag(marshal(reqBody("a", true)), 99, protowire.VarintType), 7)
	rich := respHeaders("200", "10.0.0.1:8000", false)
	nested, err := structpb.NewStruct(map[string]any{"n": 1.5, "b": true, "z": nil, "s": map[string]any{"l": []any{"a", 2.0, false}}})
	if err != nil {
		panic(err)
	}
	rich.MetadataContext.FilterMetadata["other"] = nested
	kindless := respHeaders("200", "", false)
	kindless.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ns": {Fields: map[string]*structpb.Value{"k": {}}}}}
	typed := respHeaders("200", "", false)
	typed.MetadataContext = &corev3.Metadata{TypedFilterMetadata: map[string]*anypb.Any{"ns": {TypeUrl: "type.googleapis.com/google.protobuf.Struct"}}}
	full := withSubset(withConfig(envoyHeaders, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED), "10.0.0.1:8000", "10.0.0.2:8000")
	full.ObservabilityMode = true
	return []struct {
		name string
		wire []byte
		fast bool
	}{
		{"request headers as Envoy sends them", marshal(full), true},
		{"headers with value, empty and non-UTF-8 raw values", marshal(valueHeaders), true},
		{"a key that is not UTF-8", badKeyWire, false},
		{"request body", marshal(body), true},
		{"empty body", marshal(reqBody("", true)), true},
		{"request trailers", marshal(trailers), true},
		{"response trailers, empty", marshal(respTrailers), true},
		{"response headers with the served report", marshal(respHeaders("200", "10.0.0.1:8000", false)), true},
		{"response body", marshal(respBody("data: x\n\n", false)), true},
		{"empty message", nil, true},
		{"metadata of every value kind", marshal(rich), true},
		{"a metadata value without a kind", marshal(kindless), false},
		{"typed metadata", marshal(typed), false},
		{"header attributes", marshal(attrs), false},
		{"request attributes", marshal(withAttrs), false},
		{"flow control", marshal(flow), false},
		{"two request parts", twoParts, false},
		{"a part twice", twice, false},
		{"unknown field", unknown, false},
		{"truncated", marshal(full)[:40], false},
	}
}

// TestDecodeRequestMatchesProto: what decodeRequest takes decodes to the
// message proto.Unmarshal builds; what it leaves, the codec still decodes
// as the proto package does (including its errors).
func TestDecodeRequestMatchesProto(t *testing.T) {
	c := newCodec()
	for _, tc := range decodeCases() {
		want := new(extprocv3.ProcessingRequest)
		wantErr := proto.Unmarshal(tc.wire, want)
		got := new(extprocv3.ProcessingRequest)
		fast := decodeRequest(tc.wire, got)
		if fast != tc.fast {
			t.Errorf("%s: decoded by hand %v, want %v", tc.name, fast, tc.fast)
		}
		if fast && (wantErr != nil || !proto.Equal(got, want)) {
			t.Errorf("%s: decoded %v, proto decodes %v (%v)", tc.name, got, want, wantErr)
		}
		viaCodec := new(extprocv3.ProcessingRequest)
		err := c.Unmarshal(sliceOf(tc.wire), viaCodec)
		if (err != nil) != (wantErr != nil) || (err == nil && !proto.Equal(viaCodec, want)) {
			t.Errorf("%s: codec = %v, %v; proto = %v, %v", tc.name, viaCodec, err, want, wantErr)
		}
	}
}

// The decoded message owns its bytes: overwriting the wire buffer after
// decoding changes nothing, and a raw value cannot be appended into its
// neighbour.
func TestDecodeRequestCopies(t *testing.T) {
	m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "a", RawValue: []byte("1")}, {Key: "b", RawValue: []byte("2")}}},
	}}}
	wire, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := new(extprocv3.ProcessingRequest)
	if !decodeRequest(wire, got) {
		t.Fatal("not decoded by hand")
	}
	for i := range wire {
		wire[i] = 'z'
	}
	hs := got.GetRequestHeaders().GetHeaders().GetHeaders()
	_ = append(hs[0].RawValue, 'x')
	if !proto.Equal(got, m) {
		t.Errorf("decoded message changed with its buffer: %v", got)
	}
}

// FuzzDecodeRequest: whatever decodeRequest accepts, proto.Unmarshal
// accepts too and decodes to the same message.
func FuzzDecodeRequest(f *testing.F) {
	for _, tc := range decodeCases() {
		f.Add(tc.wire)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		got := new(extprocv3.ProcessingRequest)
		if !decodeRequest(wire, got) {
			return
		}
		want := new(extprocv3.ProcessingRequest)
		if err := proto.Unmarshal(wire, want); err != nil {
			t.Fatalf("decoded by hand, but proto fails: %v", err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto decodes %v", got, want)
		}
	})
}

// BenchmarkUnmarshal: one stream's request-path messages as eppload sends
// them (Envoy's request headers with a subset hint, one 8 KB body chunk,
// the response headers with the served report, the last response chunk),
// by gRPC's proto codec and by the server's. On a shared machine compare
// cpu-µs/op (this process's CPU time, the collector's included), not ns/op.
func BenchmarkUnmarshal(b *testing.B) {
	var wires [][]byte
	for _, m := range []proto.Message{
		withSubset(withConfig(reqHeaders(map[string]string{
			":method": "POST", ":path": "/v1/chat/completions", ":authority": "gw", ":scheme": "http",
			"content-type": "application/json", "content-length": "8192", "x-request-id": "4b1d3c0e-6c2e-4d39-9f57-0d5c1e2a7b11",
			"x-forwarded-for": "10.1.2.3", "x-envoy-external-address": "10.1.2.3", "user-agent": "eppload",
		}, false), extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED), "127.0.0.2:20001", "127.0.0.3:20002"),
		reqBody(string(bytes.Repeat([]byte("x"), 8192)), true),
		respHeaders("200", "127.0.0.2:20001", false),
		respBody("data: [DONE]\n\n", true),
	} {
		w, err := proto.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		wires = append(wires, w)
	}
	for _, c := range benchCodecs() {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime()
			for range b.N {
				for _, w := range wires {
					if err := c.codec.Unmarshal(sliceOf(w), new(extprocv3.ProcessingRequest)); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportCPU(b, start)
		})
	}
}

// sliceOf is wire bytes as gRPC hands them to a codec.
func sliceOf(b []byte) mem.BufferSlice { return mem.BufferSlice{mem.SliceBuffer(b)} }
