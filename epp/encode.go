package epp

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the ProcessingResponse parts the answers write.
const (
	fieldRespRequestHeaders   = 1
	fieldRespResponseHeaders  = 2
	fieldRespRequestBody      = 3
	fieldRespResponseBody     = 4
	fieldRespRequestTrailers  = 5
	fieldRespResponseTrailers = 6
	fieldRespDynamicMetadata  = 8

	fieldHeadersOrBodyResponse = 1 // HeadersResponse.response, BodyResponse.response
	fieldCommonHeaderMutation  = 2
	fieldCommonBodyMutation    = 3
	fieldCommonClearRouteCache = 5
	fieldMutationSetHeaders    = 1 // HeaderMutation.set_headers
	fieldBodyMutationStreamed  = 3 // BodyMutation.streamed_response
	fieldStreamedBody          = 1
	fieldStreamedEndOfStream   = 2

	fieldOptionHeader       = 1 // HeaderValueOption.header
	fieldOptionAppendAction = 3
	fieldHeaderKey          = 1 // HeaderValue.key
	fieldHeaderRawValue     = 3
	appendOverwriteOrAdd    = 2 // HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD

	fieldStructFields     = 1 // Struct.fields, a map: entries of key 1, value 2
	fieldMapKey           = 1
	fieldMapValue         = 2
	fieldValueString      = 3 // Value.string_value
	fieldValueStructValue = 5 // Value.struct_value
)

// wireAnswer is one ProcessingResponse encoded by hand: head, then tail —
// a re-emitted body chunk's bytes, sent from where they lie instead of
// being copied into a marshal buffer. The server's codec hands both to gRPC
// as they are; the bytes decode to the message the proto package would
// write for the same answer (TestWireAnswersMatchProto). A gRPC server
// built without that codec cannot send one: its proto codec refuses a
// wireAnswer, and every stream fails at its first answer.
//
// gRPC keeps both slices after SendMsg returns, until its writer goroutine
// has written the frame, so neither may be written again: a head's slab
// only moves on (heads), and a tail is a body the stream lets go once it is
// sent — a received chunk's bytes (copied out of gRPC's receive buffer when
// decoded) or the request body held for the pick.
type wireAnswer struct {
	head, tail []byte
	slots      *sendSlots // the stream's, set as it sends; nil: the codec allocates the list
}

// heads hands out the encoded heads of one stream's answers from a shared
// slab. gRPC keeps each head until it is written, so a head is never
// written over: the slab only moves on, and a new one is taken when it is
// spent — one allocation for a stream's answers instead of one each.
type heads struct{ slab []byte }

// slabSize fits a pick with sixteen endpoints and the answers after it.
const slabSize = 2048

// take returns an empty slice with room for exactly n bytes.
func (h *heads) take(n int) []byte {
	if cap(h.slab)-len(h.slab) < n {
		h.slab = make([]byte, 0, max(n, slabSize))
	}
	at := len(h.slab)
	h.slab = h.slab[:at+n]
	return h.slab[at : at : at+n]
}

// sizeField is a length-delimited field of n bytes (field numbers below 16).
func sizeField(n int) int { return 1 + protowire.SizeBytes(n) }

func appendField(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	return append(appendField(b, num, len(s)), s...)
}

// sizeOption is a HeaderValueOption setting a key of keyLen bytes to a
// value of valueLen with OVERWRITE_IF_EXISTS_OR_ADD (an empty value is left
// out, as proto3 does).
func sizeOption(keyLen, valueLen int) int {
	return sizeField(sizeHeaderValue(keyLen, valueLen)) + 2
}

func sizeHeaderValue(keyLen, valueLen int) int {
	hv := sizeField(keyLen)
	if valueLen > 0 {
		hv += sizeField(valueLen)
	}
	return hv
}

// appendOption writes one set_headers entry of a HeaderMutation.
func appendOption[V string | []byte](b []byte, key string, value V) []byte {
	b = appendField(b, fieldMutationSetHeaders, sizeOption(len(key), len(value)))
	b = appendField(b, fieldOptionHeader, sizeHeaderValue(len(key), len(value)))
	b = appendString(b, fieldHeaderKey, key)
	if len(value) > 0 {
		b = append(appendField(b, fieldHeaderRawValue, len(value)), value...)
	}
	b = protowire.AppendTag(b, fieldOptionAppendAction, protowire.VarintType)
	return append(b, appendOverwriteOrAdd)
}

// sizeEntry is a map<string, Value> entry whose value is valueSize bytes.
func sizeEntry(key string, valueSize int) int {
	return sizeField(len(key)) + sizeField(valueSize)
}

// notUTF8Error reports a proto3 string field the answer would carry whose
// bytes are not UTF-8. The proto package refuses to marshal such a message,
// and a peer that validates strings (Envoy's C++ protobuf parser) refuses
// to parse it, so the hand encoder refuses too rather than send bytes the
// proxy cannot read.
type notUTF8Error struct{ field string }

func (e *notUTF8Error) Error() string {
	return fmt.Sprintf("%s is not valid UTF-8: protobuf string fields must be", e.field)
}

// encodePick writes the request-headers answer carrying the pick: the
// destination and content-length headers, the picker's extra headers
// (keys lower-cased), clear_route_cache, and the dynamic metadata
// {namespace: {x-gateway-destination-endpoint: dest}} — the message
// pickResponse builds, without building it. bodyLen < 0 leaves
// content-length out.
//
// Header values travel in HeaderValue.raw_value, a bytes field Envoy
// defines for values that need not be UTF-8 (HTTP allows obs-text), so any
// value goes out as it is. The destination also travels as a metadata
// string (google.protobuf.Value.string_value), and the namespace and the
// header keys are strings: when one of those is not UTF-8, encodePick
// returns a *notUTF8Error and no answer, where proto.Marshal would fail on
// the same message.
func encodePick(h *heads, namespace string, res Result, bodyLen int) (wireAnswer, error) {
	if !utf8.ValidString(namespace) {
		return wireAnswer{}, &notUTF8Error{field: "the metadata namespace"}
	}
	dest := joinEndpoints(h, res.Endpoints)
	if !utf8.Valid(dest) {
		return wireAnswer{}, &notUTF8Error{field: "the picked endpoint list (metadata " + HeaderDestination + ")"}
	}
	var lenBuf [20]byte
	var contentLength []byte
	if bodyLen >= 0 {
		contentLength = strconv.AppendInt(lenBuf[:0], int64(bodyLen), 10)
	}
	type header struct{ key, value string }
	var extraBuf [2]header // the picker's headers (keys lower-cased), on the stack for the usual one
	extra := extraBuf[:0]
	for k, v := range res.Headers {
		k = strings.ToLower(k) // turns bytes that are not UTF-8 into U+FFFD, as pickResponse does
		if !utf8.ValidString(k) {
			return wireAnswer{}, &notUTF8Error{field: "a picker header's key"}
		}
		extra = append(extra, header{k, v})
	}
	mutation := sizeField(sizeOption(len(HeaderDestination), len(dest)))
	if bodyLen >= 0 {
		mutation += sizeField(sizeOption(len(headerContentLength), len(contentLength)))
	}
	for _, e := range extra {
		mutation += sizeField(sizeOption(len(e.key), len(e.value)))
	}
	common := sizeField(mutation) + 2                           // + clear_route_cache
	destValue := sizeField(len(dest))                           // Value{string_value: dest}
	inner := sizeField(sizeEntry(HeaderDestination, destValue)) // Struct{HeaderDestination: …}
	nsValue := sizeField(inner)                                 // Value{struct_value: …}
	metadata := sizeField(sizeEntry(namespace, nsValue))        // Struct{namespace: …}
	b := h.take(sizeField(sizeField(common)) + sizeField(metadata))

	b = appendField(b, fieldRespRequestHeaders, sizeField(common))
	b = appendField(b, fieldHeadersOrBodyResponse, common)
	b = appendField(b, fieldCommonHeaderMutation, mutation)
	b = appendOption(b, HeaderDestination, dest)
	if bodyLen >= 0 {
		b = appendOption(b, headerContentLength, contentLength)
	}
	for _, e := range extra {
		b = appendOption(b, e.key, e.value)
	}
	b = protowire.AppendTag(b, fieldCommonClearRouteCache, protowire.VarintType)
	b = append(b, 1)

	b = appendField(b, fieldRespDynamicMetadata, metadata)
	b = appendField(b, fieldStructFields, sizeEntry(namespace, nsValue))
	b = appendString(b, fieldMapKey, namespace)
	b = appendField(b, fieldMapValue, nsValue)
	b = appendField(b, fieldValueStructValue, inner)
	b = appendField(b, fieldStructFields, sizeEntry(HeaderDestination, destValue))
	b = appendString(b, fieldMapKey, HeaderDestination)
	b = appendField(b, fieldMapValue, destValue)
	b = append(appendField(b, fieldValueString, len(dest)), dest...)
	return wireAnswer{head: b}, nil
}

// joinEndpoints is strings.Join(eps, ",") written into the stream's slab:
// the bytes are only read while the answer is encoded from them.
func joinEndpoints(h *heads, eps []string) []byte {
	n := len(eps) - 1
	for _, e := range eps {
		n += len(e)
	}
	b := h.take(max(n, 0))
	for i, e := range eps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e...)
	}
	return b
}

// encodeChunk writes a body answer (field: request or response body)
// re-emitting body unchanged as a streamed response; end_of_stream goes
// before the body on the wire so the body can be the tail.
func encodeChunk(h *heads, field protowire.Number, body []byte, eos bool) wireAnswer {
	streamed := 0
	if eos {
		streamed = 2
	}
	if len(body) > 0 {
		streamed += sizeField(len(body))
	}
	mutation := sizeField(streamed)
	common := sizeField(mutation)
	resp := sizeField(common)
	b := h.take(sizeField(resp) - len(body)) // the body is the tail, not copied
	b = appendField(b, field, resp)
	b = appendField(b, fieldHeadersOrBodyResponse, common)
	b = appendField(b, fieldCommonBodyMutation, mutation)
	b = appendField(b, fieldBodyMutationStreamed, streamed)
	if eos {
		b = protowire.AppendTag(b, fieldStreamedEndOfStream, protowire.VarintType)
		b = append(b, 1)
	}
	if len(body) == 0 {
		return wireAnswer{head: b}
	}
	return wireAnswer{head: appendField(b, fieldStreamedBody, len(body)), tail: body}
}

// encodeEmpty writes an answer whose part is an empty message: the
// pass-through acknowledgements. nested adds an empty CommonResponse inside
// it (a buffered response body chunk's answer carries one; the headers and
// trailers answers do not).
func encodeEmpty(h *heads, field protowire.Number, nested bool) wireAnswer {
	if !nested {
		return wireAnswer{head: appendField(h.take(2), field, 0)}
	}
	b := h.take(4)
	b = appendField(b, field, 2)
	return wireAnswer{head: appendField(b, fieldHeadersOrBodyResponse, 0)}
}
