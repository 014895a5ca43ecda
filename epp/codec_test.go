package epp

import (
	"bytes"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestCodecMatchesProto: a message (a refusal, a request, the reference
// answers) marshalled by the codec decodes to the message itself, and an
// answer the stream encodes by hand goes through the codec as it is — head
// then tail, the body not copied — and decodes to the message the
// generated types build for it.
func TestCodecMatchesProto(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 64<<10) // above gRPC's pooling threshold
	cases := []struct {
		name string
		msg  proto.Message
	}{
		{"pick", pickResponse(DefaultDestinationNamespace, Result{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, Headers: map[string]string{"X-Prefiller-Host-Port": "10.0.0.3:8000"}}, 8192)},
		{"pick in trailers", pickResponse("ns", Result{Endpoints: []string{"10.0.0.1:8000"}}, -1)},
		{"request chunk", requestChunk([]byte(`{"model":"m"}`), true)},
		{"large request chunk", requestChunk(big, false)},
		{"response chunk streamed", responseChunk([]byte("data: x\n\n"), false, true)},
		{"response chunk buffered", responseChunk(nil, true, false)},
		{"request trailers", requestTrailersOK()},
		{"response headers", responseHeadersOK()},
		{"response trailers", responseTrailersOK()},
		{"refusal", refusalResponse(DefaultRefusalReasonHeader, &Refusal{Status: 429, Reason: "shed"})},
		{"a request", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: big, EndOfStream: true}}}},
		{"not ext_proc", &structpb.Value{Kind: &structpb.Value_StringValue{StringValue: "v"}}},
	}
	c := newCodec()
	if c.Name() != grpcproto.Name {
		t.Fatalf("codec name %q, want %q", c.Name(), grpcproto.Name)
	}
	std := encoding.GetCodecV2(grpcproto.Name)
	for _, tc := range cases {
		data, err := c.Marshal(tc.msg)
		if err != nil {
			t.Fatalf("%s: marshal: %v", tc.name, err)
		}
		got := tc.msg.ProtoReflect().New().Interface()
		if err := std.Unmarshal(data, got); err != nil {
			t.Fatalf("%s: the proto codec cannot read the codec's bytes: %v", tc.name, err)
		}
		if !proto.Equal(got, tc.msg) {
			t.Errorf("%s: decoded %v, want %v", tc.name, got, tc.msg)
		}
		back := tc.msg.ProtoReflect().New().Interface()
		if err := c.Unmarshal(data, back); err != nil || !proto.Equal(back, tc.msg) {
			t.Errorf("%s: codec round trip = %v, %v", tc.name, back, err)
		}
		data.Free()
	}

	var h heads
	wires := []struct {
		name string
		a    wireAnswer
		want proto.Message
	}{
		{"hand-encoded pick", mustPick(&h, DefaultDestinationNamespace, Result{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, Headers: map[string]string{"X-Prefiller-Host-Port": "10.0.0.3:8000"}}, 8192),
			pickResponse(DefaultDestinationNamespace, Result{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, Headers: map[string]string{"X-Prefiller-Host-Port": "10.0.0.3:8000"}}, 8192)},
		{"hand-encoded large request chunk", encodeChunk(&h, fieldRespRequestBody, big, false), requestChunk(big, false)},
		{"hand-encoded response trailers", encodeEmpty(&h, fieldRespResponseTrailers, false), responseTrailersOK()},
	}
	var slots sendSlots // the second round lists the bytes in a stream's slots, as Process does
	for round, tc := range append(wires, wires...) {
		if round >= len(wires) {
			tc.a.slots = &slots
		}
		data, err := c.Marshal(&tc.a)
		if err != nil {
			t.Fatalf("%s: marshal: %v", tc.name, err)
		}
		if len(tc.a.tail) > 0 && (len(data) != 2 || &data[1].ReadOnlyData()[0] != &tc.a.tail[0]) {
			t.Errorf("%s: the body was copied or moved: %d buffers", tc.name, len(data))
		}
		got := &extprocv3.ProcessingResponse{}
		if err := std.Unmarshal(data, got); err != nil {
			t.Fatalf("%s: the proto codec cannot read the codec's bytes: %v", tc.name, err)
		}
		if !proto.Equal(got, tc.want) {
			t.Errorf("%s: decoded %v, want %v", tc.name, got, tc.want)
		}
		data.Free()
	}
	if slots.used == 0 {
		t.Error("the answers with slots did not use them")
	}
}

// TestSendSlots: a stream's answers are listed for gRPC in its own slots,
// without allocating; gRPC may still hold an earlier list while the next
// is built, so none is written over; once the slots run out the codec
// allocates lists as before.
func TestSendSlots(t *testing.T) {
	c := newCodec()
	var h heads
	var slots sendSlots
	type sent struct {
		list       mem.BufferSlice
		head, tail []byte
	}
	var lists []sent
	for i := 0; ; i++ {
		body := bytes.Repeat([]byte{byte('a' + i)}, i%3*100) // empty, 100 and 200 bytes: lists of one and two
		a := encodeChunk(&h, fieldRespRequestBody, body, false)
		a.slots = &slots
		before := slots.used
		data, err := c.Marshal(&a)
		if err != nil {
			t.Fatal(err)
		}
		if slots.used == before { // out of slots: the codec's own list
			if before+len(data) <= sendSlotCount {
				t.Fatalf("answer %d: %d slots free for %d buffers, yet none taken", i, sendSlotCount-before, len(data))
			}
			break
		}
		lists = append(lists, sent{data, a.head, a.tail})
		if i > 2*sendSlotCount {
			t.Fatal("the slots never ran out")
		}
	}
	for i, l := range lists {
		if !bytes.Equal(l.list[0].ReadOnlyData(), l.head) || (len(l.tail) > 0) != (len(l.list) == 2) ||
			len(l.tail) > 0 && &l.list[1].ReadOnlyData()[0] != &l.tail[0] {
			t.Errorf("list %d was written over or copies its body", i)
		}
	}
	a := encodeEmpty(&h, fieldRespResponseHeaders, false)
	if n := testing.AllocsPerRun(100, func() {
		slots.used = 0
		a.slots = &slots
		if _, err := c.Marshal(&a); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("listing an answer in the slots allocates %.0f times, want 0", n)
	}
}

// benchCodecs are the two codecs the codec benchmarks compare: gRPC's
// proto codec and the server's.
func benchCodecs() []struct {
	name  string
	codec encoding.CodecV2
} {
	return []struct {
		name  string
		codec encoding.CodecV2
	}{{"proto", encoding.GetCodecV2(grpcproto.Name)}, {"server", newCodec()}}
}

// BenchmarkMarshal: the four answers of one stream (the pick with 16
// endpoints, an 8 KB body re-emitted, the response headers and the last
// response chunk): built as messages and marshalled by gRPC's proto codec,
// and encoded by hand and handed over by the server's codec.
func BenchmarkMarshal(b *testing.B) {
	eps := sixteenEndpoints()
	body := bytes.Repeat([]byte("x"), 8192)
	last := []byte("data: [DONE]\n\n")
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		c := encoding.GetCodecV2(grpcproto.Name)
		for range b.N {
			for _, m := range []proto.Message{
				pickResponse(DefaultDestinationNamespace, Result{Endpoints: eps}, 8192),
				requestChunk(body, true),
				responseHeadersOK(),
				responseChunk(last, true, true),
			} {
				data, err := c.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		}
	})
	b.Run("server", func(b *testing.B) {
		b.ReportAllocs()
		c := newCodec()
		for range b.N {
			var h heads
			for _, a := range []wireAnswer{
				mustPick(&h, DefaultDestinationNamespace, Result{Endpoints: eps}, 8192),
				encodeChunk(&h, fieldRespRequestBody, body, true),
				encodeEmpty(&h, fieldRespResponseHeaders, false),
				encodeChunk(&h, fieldRespResponseBody, last, true),
			} {
				data, err := c.Marshal(&a)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		}
	})
}
