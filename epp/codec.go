package epp

import (
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// vtMarshaler is the generated marshalling code Envoy's published Go protos
// carry (vtprotobuf): straight-line field writes, where the proto package
// walks each message's reflection tables to size it and again to write it.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

// codec is the ext_proc server's gRPC codec: every answer the EPP sends is
// marshalled by its generated code, and a proxy's usual ProcessingRequest is
// decoded by decodeRequest; anything else goes through gRPC's own proto
// codec. The wire bytes decode to the same message (TestCodecMatchesProto).
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

// Marshal writes v into one buffer of its exact size, taken from gRPC's
// buffer pool above the size gRPC pools at (as its proto codec does).
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMarshaler)
	if !ok {
		return c.proto.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVTStrict(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVTStrict((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}
