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
	if len(a.tail) == 0 {
		return mem.BufferSlice{mem.SliceBuffer(a.head)}, nil
	}
	return mem.BufferSlice{mem.SliceBuffer(a.head), mem.SliceBuffer(a.tail)}, nil
}
