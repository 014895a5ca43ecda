package epp

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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

// decodeHeaders turns an ext_proc header map into Headers and reports the
// bytes they hold, what a stream that keeps them takes from the body
// budget. The names and values are slices of one string holding them
// all: a request's dozen headers cost one string allocation, not one
// each, and what the stream keeps is that string, never the received
// message. The bytes held are that string's capacity (a name that
// lower-cases longer, such as U+023A, grows it past the bytes received)
// plus headerEntryBytes an entry.
func decodeHeaders(m *corev3.HeaderMap) (Headers, int64) {
	hs := m.GetHeaders()
	out := make(Headers, len(hs))
	n := 0
	for _, h := range hs {
		n += len(h.GetKey()) + len(h.GetRawValue()) + len(h.GetValue())
	}
	var b strings.Builder
	b.Grow(n)
	var endsBuf [64]int // on the stack for any usual request: a name's end, then its value's
	ends := endsBuf[:0]
	for _, h := range hs {
		writeLowerName(&b, h.GetKey())
		ends = append(ends, b.Len())
		b.Write(headerValue(h))
		ends = append(ends, b.Len())
	}
	all := b.String()
	// One backing array for the common single-valued header; a repeated
	// header's append copies out of it (capacity is capped at one).
	vals := make([]string, len(hs))
	start := 0
	for i := range hs {
		k := all[start:ends[2*i]]
		vals[i] = all[ends[2*i]:ends[2*i+1]]
		start = ends[2*i+1]
		if prev, ok := out[k]; ok {
			out[k] = append(prev, vals[i])
			continue
		}
		out[k] = vals[i : i+1 : i+1]
	}
	return out, int64(b.Cap()) + headerEntryBytes*int64(len(hs))
}

// writeLowerName writes a header name lower-cased, as strings.ToLower
// would: ASCII byte by byte, anything else through ToLower itself (no
// proxy sends such names; HTTP names are tokens).
func writeLowerName(b *strings.Builder, k string) {
	lower := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= utf8.RuneSelf {
			b.WriteString(strings.ToLower(k))
			return
		}
		lower = lower && !('A' <= c && c <= 'Z')
	}
	if lower { // what Envoy sends: HTTP/2 names are lower case
		b.WriteString(k)
		return
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
}

// headerEntryBytes is what Headers spend on one entry beside its name and
// value bytes: the map slot, the value slice and its string header.
const headerEntryBytes = 64

// heldSubsetBytes is what a stream holds for its subset hint: each
// address is its own string (the metadata it came in is dropped).
func heldSubsetBytes(subset []string) int64 {
	var n int64
	for _, e := range subset {
		n += int64(len(e)) + 16
	}
	return n
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
	// Written so NaN (which ParseFloat accepts and which compares false
	// either way) is refused too: converted, it is a huge negative duration.
	if err != nil || !(ms >= 0 && ms <= float64(24*time.Hour/time.Millisecond)) {
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
// subset it returns eps unchanged. A hint may hold a hundred thousand
// addresses: for a long hint and a long pick, the pick's endpoints go
// into a set and the hint is read once, so the cost stays linear in the
// hint; otherwise the plain loops are as cheap and allocate no set.
func filterSubset(eps, subset []string) []string {
	if subset == nil {
		return eps
	}
	if len(eps) <= shortPick || len(subset) <= shortHint {
		return filterSubsetLoops(eps, subset)
	}
	out := eps[:0:0]
	in := make(map[string]bool, len(eps)) // endpoint → named by the hint
	for _, e := range eps {
		in[e] = false
	}
	for _, s := range subset {
		if _, ok := in[s]; ok {
			in[s] = true
		}
	}
	for _, e := range eps {
		if in[e] {
			out = append(out, e)
		}
	}
	return out
}

// filterSubsetLoops is filterSubset by comparing every picked endpoint
// with every hint entry: no set to build, so the cheaper way when either
// list is short.
func filterSubsetLoops(eps, subset []string) []string {
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

// Up to these lengths filterSubset compares every endpoint with every hint
// entry: at most shortPick comparisons per hint entry, or shortHint per
// picked endpoint, each about the cost of a set lookup.
const (
	shortPick = 4
	shortHint = 16
)

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		// The client may have sent its own copy of a header we own; ours wins.
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
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
			// details is a string field: bytes that are not UTF-8 (a reason
			// built from a client's header) would make the whole answer
			// unmarshalable and the client would get no status at all. The
			// header and the body are bytes and carry the reason as it is.
			Details: "epp_" + strings.ToValidUTF8(strings.Join(strings.Fields(r.Reason), "_"), "\uFFFD"),
		}},
	}
}
