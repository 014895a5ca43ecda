package epp

import (
	"math"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Field numbers of the ProcessingRequest parts decodeRequest reads.
const (
	fieldRequestHeaders    = 2
	fieldResponseHeaders   = 3
	fieldRequestBody       = 4
	fieldResponseBody      = 5
	fieldRequestTrailers   = 6
	fieldResponseTrailers  = 7
	fieldMetadataContext   = 8
	fieldObservabilityMode = 10
	fieldProtocolConfig    = 11

	// The request oneof's fields, as a bit set of field numbers.
	requestOneof = 1<<fieldRequestHeaders | 1<<fieldResponseHeaders | 1<<fieldRequestBody |
		1<<fieldResponseBody | 1<<fieldRequestTrailers | 1<<fieldResponseTrailers
)

// decodeRequest fills an empty m from b, the wire bytes of a
// ProcessingRequest, when b holds only the parts a proxy sends on every
// stream: headers (as a HeaderMap), body chunks, trailers, metadata
// context, the protocol configuration and the observability flag, each at
// most once. It reports false for anything else — another field, a field
// repeated (which proto merges), two parts of the request oneof, a string
// that is not UTF-8, malformed bytes — and the caller then decodes b with
// the proto package, which resets m first. What it does decode is the
// message proto.Unmarshal builds (TestDecodeRequestMatchesProto,
// FuzzDecodeRequest), with fewer allocations and no reflection: a
// header map's entries share one backing array and one copy of their
// strings, where the proto package allocates each entry, key and value.
// Nothing in m aliases b.
func decodeRequest(b []byte, m *extprocv3.ProcessingRequest) bool {
	var seen uint32
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > 31 {
			return false
		}
		b = b[n:]
		bit := uint32(1) << num
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		if typ == protowire.VarintType && num == fieldObservabilityMode {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			m.ObservabilityMode = v != 0
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case fieldRequestHeaders, fieldResponseHeaders:
			h, ok := decodeHTTPHeaders(v)
			if !ok {
				return false
			}
			if num == fieldRequestHeaders {
				m.Request = &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}
			} else {
				m.Request = &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: h}
			}
		case fieldRequestBody, fieldResponseBody:
			body, ok := decodeHTTPBody(v)
			if !ok {
				return false
			}
			if num == fieldRequestBody {
				m.Request = &extprocv3.ProcessingRequest_RequestBody{RequestBody: body}
			} else {
				m.Request = &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: body}
			}
		case fieldRequestTrailers, fieldResponseTrailers:
			t, ok := decodeHTTPTrailers(v)
			if !ok {
				return false
			}
			if num == fieldRequestTrailers {
				m.Request = &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: t}
			} else {
				m.Request = &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: t}
			}
		case fieldMetadataContext:
			if m.MetadataContext = decodeMetadata(v); m.MetadataContext == nil {
				return false
			}
		case fieldProtocolConfig:
			pc := new(extprocv3.ProtocolConfiguration)
			if proto.Unmarshal(v, pc) != nil {
				return false
			}
			m.ProtocolConfig = pc
		default:
			return false
		}
	}
	set := seen & requestOneof
	return set&(set-1) == 0 // at most one part of the oneof
}

// decodeHTTPHeaders decodes an HttpHeaders without attributes.
func decodeHTTPHeaders(b []byte) (*extprocv3.HttpHeaders, bool) {
	h := new(extprocv3.HttpHeaders)
	var seen uint8
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType && seen&1 == 0: // headers
			seen |= 1
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			if h.Headers = decodeHeaderMap(v); h.Headers == nil {
				return nil, false
			}
		case num == 3 && typ == protowire.VarintType: // end_of_stream
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			h.EndOfStream = v != 0
		default:
			return nil, false
		}
	}
	return h, true
}

// decodeHTTPTrailers decodes an HttpTrailers.
func decodeHTTPTrailers(b []byte) (*extprocv3.HttpTrailers, bool) {
	t := new(extprocv3.HttpTrailers)
	if len(b) == 0 {
		return t, true
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil, false
	}
	v, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, false
	}
	if t.Trailers = decodeHeaderMap(v); t.Trailers == nil {
		return nil, false
	}
	return t, true
}

// decodeHTTPBody decodes an HttpBody; the body is copied out of b at its
// exact length.
func decodeHTTPBody(b []byte) (*extprocv3.HttpBody, bool) {
	body := new(extprocv3.HttpBody)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, false
			}
			b = b[n:]
			if len(v) > 0 {
				body.Body = append([]byte(nil), v...)
			} else {
				body.Body = nil
			}
			continue
		}
		if typ != protowire.VarintType || num < 2 || num > 5 {
			return nil, false
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch num {
		case 2:
			body.EndOfStream = v != 0
		case 3:
			body.EndOfStreamWithoutMessage = v != 0
		case 4:
			body.GrpcMessageCompressed = v != 0
		case 5:
			body.DrainComplete = v != 0
		}
	}
	return body, true
}

// decodeHeaderMap decodes a HeaderMap whose entries hold only key, value
// and raw_value, or returns nil. All entries live in one array, their keys
// and values are substrings of one copy of b, their raw values slices of
// another (capacity capped, so an append cannot reach the next one).
func decodeHeaderMap(b []byte) *corev3.HeaderMap {
	n := 0
	for rest := b; len(rest) > 0; n++ {
		num, typ, k := protowire.ConsumeTag(rest)
		if k < 0 || num != 1 || typ != protowire.BytesType {
			return nil
		}
		l := protowire.ConsumeFieldValue(num, typ, rest[k:])
		if l < 0 {
			return nil
		}
		rest = rest[k+l:]
	}
	vals := make([]corev3.HeaderValue, n)
	m := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, n)}
	str := string(b)
	var raw []byte // a copy of b for the raw values, made on the first one
	pos := 0
	for i := range vals {
		hv := &vals[i]
		m.Headers[i] = hv
		_, _, k := protowire.ConsumeTag(b[pos:])
		entry, l := protowire.ConsumeBytes(b[pos+k:])
		start := pos + k + l - len(entry) // where the entry's fields begin in b
		pos += k + l
		for off := start; off < pos; {
			num, typ, k := protowire.ConsumeTag(b[off:pos])
			if k < 0 || typ != protowire.BytesType {
				return nil
			}
			v, l := protowire.ConsumeBytes(b[off+k : pos])
			if l < 0 {
				return nil
			}
			from := off + k + l - len(v)
			to := from + len(v)
			off = to
			switch num {
			case 1:
				hv.Key = str[from:to]
				if !utf8.ValidString(hv.Key) {
					return nil
				}
			case 2:
				hv.Value = str[from:to]
				if !utf8.ValidString(hv.Value) {
					return nil
				}
			case 3:
				if len(v) == 0 {
					hv.RawValue = nil
					continue
				}
				if raw == nil {
					raw = append([]byte(nil), b...)
				}
				hv.RawValue = raw[from:to:to]
			default:
				return nil
			}
		}
	}
	return m
}

// maxStructDepth bounds the nesting decodeStruct follows; deeper metadata
// is left to the proto package.
const maxStructDepth = 8

// decodeMetadata decodes a Metadata holding only filter_metadata (the
// subset hint, the served report), or returns nil.
func decodeMetadata(b []byte) *corev3.Metadata {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	for len(b) > 0 {
		key, val, n := consumeMapEntry(b, 1)
		if n < 0 {
			return nil
		}
		b = b[n:]
		s := decodeStruct(val, 0)
		if s == nil {
			return nil
		}
		md.FilterMetadata[key] = s
	}
	return md
}

// consumeMapEntry reads one entry of the map field num at the start of b:
// a UTF-8 string key (field 1) then a message value (field 2), each once
// and in that order, as every encoder writes them. n < 0: anything else.
func consumeMapEntry(b []byte, num protowire.Number) (key string, val []byte, n int) {
	got, typ, k := protowire.ConsumeTag(b)
	if k < 0 || got != num || typ != protowire.BytesType {
		return "", nil, -1
	}
	entry, l := protowire.ConsumeBytes(b[k:])
	if l < 0 {
		return "", nil, -1
	}
	n = k + l
	f, typ, k := protowire.ConsumeTag(entry)
	if k < 0 || f != 1 || typ != protowire.BytesType {
		return "", nil, -1
	}
	kb, l := protowire.ConsumeBytes(entry[k:])
	if l < 0 {
		return "", nil, -1
	}
	entry = entry[k+l:]
	f, typ, k = protowire.ConsumeTag(entry)
	if k < 0 || f != 2 || typ != protowire.BytesType {
		return "", nil, -1
	}
	val, l = protowire.ConsumeBytes(entry[k:])
	if l < 0 || k+l != len(entry) || !utf8.Valid(kb) {
		return "", nil, -1
	}
	return string(kb), val, n
}

// decodeStruct decodes a Struct, or returns nil.
func decodeStruct(b []byte, depth int) *structpb.Struct {
	if depth > maxStructDepth {
		return nil
	}
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for len(b) > 0 {
		key, val, n := consumeMapEntry(b, 1)
		if n < 0 {
			return nil
		}
		b = b[n:]
		v := decodeValue(val, depth)
		if v == nil {
			return nil
		}
		s.Fields[key] = v
	}
	return s
}

// decodeValue decodes a Value with exactly one kind set, or returns nil.
func decodeValue(b []byte, depth int) *structpb.Value {
	num, typ, k := protowire.ConsumeTag(b)
	if k < 0 {
		return nil
	}
	b = b[k:]
	var v structpb.Value
	var n int
	switch {
	case num == 1 && typ == protowire.VarintType:
		var x uint64
		x, n = protowire.ConsumeVarint(b)
		v.Kind = &structpb.Value_NullValue{NullValue: structpb.NullValue(int32(x))}
	case num == 2 && typ == protowire.Fixed64Type:
		var x uint64
		x, n = protowire.ConsumeFixed64(b)
		v.Kind = &structpb.Value_NumberValue{NumberValue: math.Float64frombits(x)}
	case num == 3 && typ == protowire.BytesType:
		var x []byte
		x, n = protowire.ConsumeBytes(b)
		if n >= 0 && !utf8.Valid(x) {
			return nil
		}
		v.Kind = &structpb.Value_StringValue{StringValue: string(x)}
	case num == 4 && typ == protowire.VarintType:
		var x uint64
		x, n = protowire.ConsumeVarint(b)
		v.Kind = &structpb.Value_BoolValue{BoolValue: x != 0}
	case num == 5 && typ == protowire.BytesType:
		var x []byte
		if x, n = protowire.ConsumeBytes(b); n >= 0 {
			s := decodeStruct(x, depth+1)
			if s == nil {
				return nil
			}
			v.Kind = &structpb.Value_StructValue{StructValue: s}
		}
	case num == 6 && typ == protowire.BytesType:
		var x []byte
		if x, n = protowire.ConsumeBytes(b); n >= 0 {
			l := decodeList(x, depth+1)
			if l == nil {
				return nil
			}
			v.Kind = &structpb.Value_ListValue{ListValue: l}
		}
	default:
		return nil
	}
	if n < 0 || n != len(b) {
		return nil
	}
	return &v
}

// decodeList decodes a ListValue, or returns nil.
func decodeList(b []byte, depth int) *structpb.ListValue {
	if depth > maxStructDepth {
		return nil
	}
	l := &structpb.ListValue{}
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 || num != 1 || typ != protowire.BytesType {
			return nil
		}
		x, n := protowire.ConsumeBytes(b[k:])
		if n < 0 {
			return nil
		}
		b = b[k+n:]
		v := decodeValue(x, depth)
		if v == nil {
			return nil
		}
		l.Values = append(l.Values, v)
	}
	return l
}
