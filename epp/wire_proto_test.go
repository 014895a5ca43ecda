package epp

import (
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// The answers as messages, built with the generated types: the reference
// the hand encoder (encode.go) is checked against, and what the codec
// tests and benchmarks marshal.

// pickAnswer is the fixed part of the pick's answer — the nested messages,
// the destination and content-length headers and the metadata — in one
// allocation; only the header slice beyond them, the value bytes and the
// two metadata maps are allocated apart.
type pickAnswer struct {
	resp      extprocv3.ProcessingResponse
	headers   extprocv3.ProcessingResponse_RequestHeaders
	headersRs extprocv3.HeadersResponse
	common    extprocv3.CommonResponse
	mutation  extprocv3.HeaderMutation
	set       [3]*corev3.HeaderValueOption
	opts      [2]corev3.HeaderValueOption
	vals      [2]corev3.HeaderValue
	md, inner structpb.Struct
	nsVal     structpb.Value
	nsKind    structpb.Value_StructValue
	destVal   structpb.Value
	destKind  structpb.Value_StringValue
}

// pickResponse is the request-headers answer carrying the pick: the header and
// the dynamic metadata hold the same value, and the route cache is cleared so
// header-based routing sees the new header. bodyLen ≥ 0 restores
// content-length, which Envoy drops in FULL_DUPLEX_STREAMED mode; pass -1 when
// the body ends in trailers (chunked framing) or there is none.
func pickResponse(namespace string, res Result, bodyLen int) *extprocv3.ProcessingResponse {
	a := &pickAnswer{}
	dest := strings.Join(res.Endpoints, ",")
	// The client may have sent its own copy of a header we own; ours wins.
	a.vals[0] = corev3.HeaderValue{Key: HeaderDestination, RawValue: []byte(dest)}
	a.opts[0] = corev3.HeaderValueOption{Header: &a.vals[0], AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
	set := append(a.set[:0], &a.opts[0])
	if bodyLen >= 0 {
		a.vals[1] = corev3.HeaderValue{Key: headerContentLength, RawValue: strconv.AppendInt(nil, int64(bodyLen), 10)}
		a.opts[1] = corev3.HeaderValueOption{Header: &a.vals[1], AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
		set = append(set, &a.opts[1])
	}
	for k, v := range res.Headers {
		set = append(set, setHeader(strings.ToLower(k), v))
	}
	a.destKind.StringValue = dest
	a.destVal.Kind = &a.destKind
	a.inner.Fields = map[string]*structpb.Value{HeaderDestination: &a.destVal}
	a.nsKind.StructValue = &a.inner
	a.nsVal.Kind = &a.nsKind
	a.md.Fields = map[string]*structpb.Value{namespace: &a.nsVal}
	a.mutation.SetHeaders = set
	a.common.HeaderMutation, a.common.ClearRouteCache = &a.mutation, true
	a.headersRs.Response = &a.common
	a.headers.RequestHeaders = &a.headersRs
	a.resp.Response, a.resp.DynamicMetadata = &a.headers, &a.md
	return &a.resp
}

// chunkAnswer is the seven nested messages of a re-emitted request body
// chunk in one allocation: a large body is re-emitted in many chunks, and
// each answer is otherwise seven small objects for the collector.
type chunkAnswer struct {
	resp     extprocv3.ProcessingResponse
	body     extprocv3.ProcessingResponse_RequestBody
	bodyResp extprocv3.BodyResponse
	common   extprocv3.CommonResponse
	mutation extprocv3.BodyMutation
	streamed extprocv3.BodyMutation_StreamedResponse
	chunk    extprocv3.StreamedBodyResponse
}

// requestChunk re-emits one request body chunk unchanged.
func requestChunk(body []byte, eos bool) *extprocv3.ProcessingResponse {
	a := &chunkAnswer{}
	a.chunk.Body, a.chunk.EndOfStream = body, eos
	a.streamed.StreamedResponse = &a.chunk
	a.mutation.Mutation = &a.streamed
	a.common.BodyMutation = &a.mutation
	a.bodyResp.Response = &a.common
	a.body.RequestBody = &a.bodyResp
	a.resp.Response = &a.body
	return &a.resp
}

// responseChunk re-emits one response body chunk unchanged (streamed mode), or
// acknowledges it without mutation (buffered modes).
func responseChunk(body []byte, eos, streamed bool) *extprocv3.ProcessingResponse {
	common := &extprocv3.CommonResponse{}
	if streamed {
		common.BodyMutation = &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: eos}},
		}
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: common}},
	}
}

// The pass-through answers: the EPP changes nothing on these phases.
func requestTrailersOK() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}},
	}
}

func responseHeadersOK() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}},
	}
}

func responseTrailersOK() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}},
	}
}
