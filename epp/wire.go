package epp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names on the wire. The destination and subset names are fixed by the GIE
// endpoint-picker protocol; the hint names by GIE and llm-d.
const (
	// HeaderDestination carries the pick to the proxy: "ip:port[,ip:port…]".
	// The same value is set in dynamic metadata under the same key.
	HeaderDestination = "x-gateway-destination-endpoint"
	// KeySubset is the filter-metadata key of the proxy's subset hint (a list
	// of "ip:port" strings).
	KeySubset = "x-gateway-destination-endpoint-subset"
	// KeyServed is the metadata key (and, as a fallback, the response header)
	// through which the proxy reports the endpoint that served the request.
	KeyServed = "x-gateway-destination-endpoint-served"

	HeaderObjective  = "x-gateway-inference-objective"
	HeaderFairnessID = "x-gateway-inference-fairness-id"
	HeaderModelName  = "x-gateway-model-name-rewrite"
	HeaderSLOTTFT    = "x-slo-ttft-ms"
	HeaderSLOTPOT    = "x-slo-tpot-ms"

	headerContentLength = "content-length"
	headerRetryAfter    = "retry-after" // on a Refusal with RetryAfter
	headerStatus        = ":status"
	headerContentType   = "content-type"
	// mediaEventStream is a streamed completion's media type (SSE).
	mediaEventStream = "text/event-stream"
)

// isEventStream reports whether a Content-Type value names an event
// stream (parameters and letter case aside).
func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), mediaEventStream)
}

// headerValue returns a header's value bytes: Envoy fills raw_value, older
// data planes and hand-written clients fill value.
func headerValue(h *corev3.HeaderValue) []byte {
	if len(h.GetRawValue()) > 0 {
		return h.GetRawValue()
	}
	return []byte(h.GetValue())
}

// decodeHeaders turns an ext_proc header map into Headers. The values are
// slices of one string holding them all: a request's dozen headers cost
// one string allocation, not one each.
func decodeHeaders(m *corev3.HeaderMap) Headers {
	hs := m.GetHeaders()
	out := make(Headers, len(hs))
	n := 0
	for _, h := range hs {
		n += len(h.GetRawValue()) + len(h.GetValue())
	}
	var b strings.Builder
	b.Grow(n)
	var endsBuf [32]int // on the stack for any usual request
	ends := endsBuf[:0]
	for _, h := range hs {
		b.Write(headerValue(h))
		ends = append(ends, b.Len())
	}
	all := b.String()
	// One backing array for the common single-valued header; a repeated
	// header's append copies out of it (capacity is capped at one).
	vals := make([]string, len(hs))
	start := 0
	for i, h := range hs {
		k := strings.ToLower(h.GetKey())
		vals[i] = all[start:ends[i]]
		start = ends[i]
		if prev, ok := out[k]; ok {
			out[k] = append(prev, vals[i])
			continue
		}
		out[k] = vals[i : i+1 : i+1]
	}
	return out
}

// decodeHints reads the steering hints. A malformed SLO is the client's error
// (400), not something to guess around.
func decodeHints(h Headers) (Hints, error) {
	hints := Hints{
		Objective:  h.Get(HeaderObjective),
		FairnessID: h.Get(HeaderFairnessID),
		ModelName:  h.Get(HeaderModelName),
	}
	var err error
	if hints.TTFT, err = decodeMillis(h, HeaderSLOTTFT); err != nil {
		return Hints{}, err
	}
	if hints.TPOT, err = decodeMillis(h, HeaderSLOTPOT); err != nil {
		return Hints{}, err
	}
	return hints, nil
}

// decodeMillis parses a non-negative millisecond count (fractions allowed, as
// llm-d sends them); absent is 0.
func decodeMillis(h Headers, name string) (time.Duration, error) {
	v := h.Get(name)
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || ms < 0 || ms > float64(24*time.Hour/time.Millisecond) {
		return 0, &Refusal{Status: 400, Reason: "invalid_" + strings.ReplaceAll(name, "-", "_")}
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// decodeSubset reads the subset hint from the request's filter metadata. It
// returns (nil, false) when there is no hint, and an error when the hint is
// not a list of strings (a proxy bug, answered with a gRPC status).
func decodeSubset(md *corev3.Metadata, namespace string) ([]string, bool, error) {
	ns := md.GetFilterMetadata()[namespace]
	if ns == nil {
		return nil, false, nil
	}
	v, ok := ns.GetFields()[KeySubset]
	if !ok {
		return nil, false, nil
	}
	list := v.GetListValue()
	if list == nil {
		return nil, false, fmt.Errorf("%s/%s: want a list of \"ip:port\" strings, got %T", namespace, KeySubset, v.GetKind())
	}
	out := make([]string, 0, len(list.GetValues()))
	for i, e := range list.GetValues() {
		s, ok := e.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return nil, false, fmt.Errorf("%s/%s[%d]: want a string, got %T", namespace, KeySubset, i, e.GetKind())
		}
		out = append(out, s.StringValue)
	}
	return out, true, nil
}

// decodeServed reads the served endpoint from the response-path metadata, or
// from the response header when the proxy only sets that.
func decodeServed(md *corev3.Metadata, namespace string, h Headers) string {
	if v := md.GetFilterMetadata()[namespace].GetFields()[KeyServed]; v != nil {
		if s := v.GetStringValue(); s != "" {
			return s
		}
	}
	return h.Get(KeyServed)
}

// filterSubset keeps the endpoints inside the subset, in order. With no
// subset it returns eps unchanged.
func filterSubset(eps, subset []string) []string {
	if subset == nil {
		return eps
	}
	out := eps[:0:0]
	for _, e := range eps {
		for _, s := range subset {
			if e == s {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		// The client may have sent its own copy of a header we own; ours wins.
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

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

// refusalResponse answers the client directly: the status, the reason in a
// header and as a text body, and a details string for the proxy's access log.
func refusalResponse(reasonHeader string, r *Refusal) *extprocv3.ProcessingResponse {
	hs := []*corev3.HeaderValueOption{setHeader(reasonHeader, r.Reason)}
	if r.RetryAfter > 0 {
		secs := (r.RetryAfter + time.Second - 1) / time.Second
		hs = append(hs, setHeader(headerRetryAfter, strconv.FormatInt(int64(secs), 10)))
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.Status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: hs},
			Body:    []byte(r.Reason + "\n"),
			Details: "epp_" + strings.Join(strings.Fields(r.Reason), "_"),
		}},
	}
}
