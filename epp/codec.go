package epp

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// codec is the ext_proc server's gRPC codec: the answers a stream encodes by
// hand (wireAnswer) go out as they are, and a proxy's usual
// ProcessingRequest is decoded by decodeRequest; anything else (a refusal,
// a request decodeRequest leaves) goes through gRPC's own proto codec. The
// wire bytes decode to the same message (TestCodecMatchesProto,
// TestWireAnswersMatchProto).
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2(proto.Name)} }

// Name is the proto codec's: the content-subtype proxies send.
func (codec) Name() string { return proto.Name }

// Unmarshal decodes a ProcessingRequest by hand when it can (decodeRequest
// copies what it keeps, so the receive buffer is released at once), else
// with the proto codec.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*extprocv3.ProcessingRequest); ok {
		var done bool
		if len(data) == 1 {
			done = decodeRequest(data[0].ReadOnlyData(), m)
		} else {
			buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
			done = decodeRequest(buf.ReadOnlyData(), m)
			buf.Free()
		}
		if done {
			return nil
		}
	}
	return c.proto.Unmarshal(data, v)
}

// Marshal hands a wireAnswer's bytes to gRPC without copying them (they
// are never written again: see heads) and marshals anything else with the
// proto codec.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	a, ok := v.(*wireAnswer)
	if !ok {
		return c.proto.Marshal(v)
	}
	if s := a.slots.take(a.head, a.tail); s != nil {
		return s, nil
	}
	if len(a.tail) == 0 {
		return mem.BufferSlice{mem.SliceBuffer(a.head)}, nil
	}
	return mem.BufferSlice{mem.SliceBuffer(a.head), mem.SliceBuffer(a.tail)}, nil
}

// sendSlots is a stream's storage for the buffer lists its answers are
// handed to gRPC in. A list built per answer costs an allocation for its
// array and one per buffer (a slice converted to the mem.Buffer
// interface): ten per stream. Here the slices live in the stream and the
// list holds pointers to them, which convert for free. gRPC keeps a list
// until its frame is written, so a slot is used once per stream, never
// again; a stream that outruns them (many body chunks) allocates as
// before.
type sendSlots struct {
	used  int
	bytes [sendSlotCount]mem.SliceBuffer
	list  [sendSlotCount]mem.Buffer
}

// sendSlotCount fits the answers of a one-chunk exchange: the pick, the
// body chunk (head and tail), the response headers' acknowledgement and a
// response chunk (head and tail). Each slot is 40 bytes of the stream.
const sendSlotCount = 6

// take returns head and tail (when not empty) as a buffer list in unused
// slots, or nil when s is nil or too few are left.
func (s *sendSlots) take(head, tail []byte) mem.BufferSlice {
	n := 1
	if len(tail) > 0 {
		n = 2
	}
	if s == nil || s.used+n > sendSlotCount {
		return nil
	}
	at := s.used
	s.used += n
	s.bytes[at] = head
	s.list[at] = &s.bytes[at]
	if n == 2 {
		s.bytes[at+1] = tail
		s.list[at+1] = &s.bytes[at+1]
	}
	return s.list[at:s.used:s.used]
}
