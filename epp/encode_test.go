package epp

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
)

// decodeWire reads a hand-encoded answer back with the proto package.
func decodeWire(t testing.TB, a wireAnswer) *extprocv3.ProcessingResponse {
	t.Helper()
	m := &extprocv3.ProcessingResponse{}
	if err := proto.Unmarshal(append(append([]byte(nil), a.head...), a.tail...), m); err != nil {
		t.Fatalf("the proto package cannot read the answer: %v", err)
	}
	return m
}

// sortSetHeaders orders a pick's extra headers by key: the picker's
// headers come from a map, so two builds of one answer list them in
// different orders.
func sortSetHeaders(m *extprocv3.ProcessingResponse) {
	hm := m.GetRequestHeaders().GetResponse().GetHeaderMutation()
	if hm == nil {
		return
	}
	slices.SortStableFunc(hm.SetHeaders, func(a, b *corev3.HeaderValueOption) int {
		return strings.Compare(a.GetHeader().GetKey(), b.GetHeader().GetKey())
	})
}

func sixteenEndpoints() []string {
	eps := make([]string, 16)
	for i := range eps {
		eps[i] = "127.0.0." + strconv.Itoa(i+2) + ":" + strconv.Itoa(20001+i)
	}
	return eps
}

// TestWireAnswersMatchProto: every answer the stream encodes by hand
// decodes to the message the generated types build for it, across the
// sizes where a length prefix takes one, two and three bytes.
func TestWireAnswersMatchProto(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 64<<10)
	mid := bytes.Repeat([]byte("y"), 200)
	cases := []struct {
		name string
		got  func(h *heads) wireAnswer
		want *extprocv3.ProcessingResponse
	}{
		{"pick, one endpoint",
			func(h *heads) wireAnswer {
				return mustPick(h, DefaultDestinationNamespace, Result{Endpoints: []string{"10.0.0.1:8000"}}, 8192)
			},
			pickResponse(DefaultDestinationNamespace, Result{Endpoints: []string{"10.0.0.1:8000"}}, 8192)},
		{"pick, sixteen endpoints",
			func(h *heads) wireAnswer {
				return mustPick(h, DefaultDestinationNamespace, Result{Endpoints: sixteenEndpoints()}, 0)
			},
			pickResponse(DefaultDestinationNamespace, Result{Endpoints: sixteenEndpoints()}, 0)},
		{"pick in trailers, other namespace",
			func(h *heads) wireAnswer { return mustPick(h, "ns", Result{Endpoints: []string{"[::1]:80"}}, -1) },
			pickResponse("ns", Result{Endpoints: []string{"[::1]:80"}}, -1)},
		{"pick with the picker's headers",
			func(h *heads) wireAnswer {
				return mustPick(h, DefaultDestinationNamespace, Result{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"},
					Headers: map[string]string{"X-Prefiller-Host-Port": "10.0.0.3:8000", "x-b": "", "X-C": strings.Repeat("v", 300)}}, 1<<20)
			},
			pickResponse(DefaultDestinationNamespace, Result{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"},
				Headers: map[string]string{"X-Prefiller-Host-Port": "10.0.0.3:8000", "x-b": "", "X-C": strings.Repeat("v", 300)}}, 1<<20)},
		{"request chunk, last", func(h *heads) wireAnswer { return encodeChunk(h, fieldRespRequestBody, []byte(`{"model":"m"}`), true) },
			requestChunk([]byte(`{"model":"m"}`), true)},
		{"request chunk, 200 bytes", func(h *heads) wireAnswer { return encodeChunk(h, fieldRespRequestBody, mid, false) },
			requestChunk(mid, false)},
		{"request chunk, 64 KB", func(h *heads) wireAnswer { return encodeChunk(h, fieldRespRequestBody, big, true) },
			requestChunk(big, true)},
		{"request chunk, empty, last", func(h *heads) wireAnswer { return encodeChunk(h, fieldRespRequestBody, nil, true) },
			requestChunk(nil, true)},
		{"request chunk, empty", func(h *heads) wireAnswer { return encodeChunk(h, fieldRespRequestBody, nil, false) },
			requestChunk(nil, false)},
		{"response chunk streamed", func(h *heads) wireAnswer {
			return encodeChunk(h, fieldRespResponseBody, []byte("data: x\n\n"), false)
		}, responseChunk([]byte("data: x\n\n"), false, true)},
		{"response chunk streamed, last", func(h *heads) wireAnswer { return encodeChunk(h, fieldRespResponseBody, big, true) },
			responseChunk(big, true, true)},
		{"response chunk buffered", func(h *heads) wireAnswer { return encodeEmpty(h, fieldRespResponseBody, true) },
			responseChunk([]byte("ignored"), true, false)},
		{"request trailers", func(h *heads) wireAnswer { return encodeEmpty(h, fieldRespRequestTrailers, false) },
			requestTrailersOK()},
		{"response headers", func(h *heads) wireAnswer { return encodeEmpty(h, fieldRespResponseHeaders, false) },
			responseHeadersOK()},
		{"response trailers", func(h *heads) wireAnswer { return encodeEmpty(h, fieldRespResponseTrailers, false) },
			responseTrailersOK()},
	}
	for _, tc := range cases {
		var h heads
		got := decodeWire(t, tc.got(&h))
		sortSetHeaders(got)
		sortSetHeaders(tc.want)
		if !proto.Equal(got, tc.want) {
			t.Errorf("%s: decoded %v\nwant %v", tc.name, got, tc.want)
		}
	}
}

// TestHeadsNeverOverwritten: the answers of one stream share a slab, and
// gRPC may still hold an earlier answer's bytes while the next is encoded.
func TestHeadsNeverOverwritten(t *testing.T) {
	var h heads
	var answers []wireAnswer
	var copies [][]byte
	body := bytes.Repeat([]byte("b"), 300)
	for i := range 200 {
		a := mustPick(&h, DefaultDestinationNamespace, Result{Endpoints: sixteenEndpoints()[:1+i%16]}, i)
		c := encodeChunk(&h, fieldRespRequestBody, body[:i], i%2 == 0)
		answers = append(answers, a, c)
		copies = append(copies, bytes.Clone(a.head), bytes.Clone(c.head))
	}
	for i, a := range answers {
		if !bytes.Equal(a.head, copies[i]) {
			t.Fatalf("answer %d was written over by a later one", i)
		}
		if len(a.head) != cap(a.head) {
			t.Fatalf("answer %d: %d bytes of room for %d: the size computed before encoding is wrong", i, cap(a.head), len(a.head))
		}
	}
}

// mustPick is encodePick for inputs that are UTF-8 wherever protobuf
// wants strings: it cannot fail, and a test that sees it fail is wrong.
func mustPick(h *heads, namespace string, res Result, bodyLen int) wireAnswer {
	a, err := encodePick(h, namespace, res, bodyLen)
	if err != nil {
		panic("encodePick refused a valid pick: " + err.Error())
	}
	return a
}

// checkPickParity encodes one pick by hand and with the proto package:
// both must refuse it (a string field that is not UTF-8) or both write
// it, and what the hand encoder writes must decode to pickResponse's
// message.
func checkPickParity(t *testing.T, name, namespace string, res Result, bodyLen int) {
	t.Helper()
	want := pickResponse(namespace, res, bodyLen)
	_, protoErr := proto.Marshal(want)
	var h heads
	got, err := encodePick(&h, namespace, res, bodyLen)
	switch {
	case protoErr != nil && err == nil:
		t.Errorf("%s: proto.Marshal refuses (%v), the hand encoder wrote %d bytes", name, protoErr, len(got.head)+len(got.tail))
	case protoErr == nil && err != nil:
		t.Errorf("%s: proto.Marshal writes it, the hand encoder refused: %v", name, err)
	case err != nil:
		var nu *notUTF8Error
		if !errors.As(err, &nu) || got.head != nil || got.tail != nil {
			t.Errorf("%s: refused with %T %v and an answer; want a *notUTF8Error and none", name, err, err)
		}
	default:
		if d := decodeWire(t, got); !proto.Equal(sortedSetHeaders(d), sortedSetHeaders(want)) {
			t.Errorf("%s: decoded %v\nwant %v", name, d, want)
		}
	}
}

func sortedSetHeaders(m *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	sortSetHeaders(m)
	return m
}

// TestEncodePickUTF8: the hand encoder refuses exactly what proto.Marshal
// refuses. Header values go in raw_value (bytes), so a value that is not
// UTF-8 — a client header the picker passed on — is sent as it is; the
// destination's metadata copy and the namespace are strings, and bytes
// that are not UTF-8 there are refused. A header key is lower-cased first,
// which turns such bytes into U+FFFD, so it is always sent.
func TestEncodePickUTF8(t *testing.T) {
	const bad = "\xff\xfe"
	eps := []string{"10.0.0.1:8000"}
	cases := []struct {
		name      string
		namespace string
		res       Result
		refused   bool
	}{
		{"ASCII", DefaultDestinationNamespace, Result{Endpoints: eps}, false},
		{"multi-byte UTF-8 everywhere", "ns.ünïcode", Result{Endpoints: []string{"host-é:80"}, Headers: map[string]string{"x-ключ": "значение"}}, false},
		{"header value not UTF-8", DefaultDestinationNamespace, Result{Endpoints: eps, Headers: map[string]string{"x-client-hint": "a" + bad}}, false},
		{"header value a lone continuation byte", DefaultDestinationNamespace, Result{Endpoints: eps, Headers: map[string]string{"x-h": "\x80"}}, false},
		{"header key not UTF-8 (lower-cased to U+FFFD)", DefaultDestinationNamespace, Result{Endpoints: eps, Headers: map[string]string{"x-" + bad: "v"}}, false},
		{"endpoint not UTF-8", DefaultDestinationNamespace, Result{Endpoints: []string{"10.0.0.1:80" + bad}}, true},
		{"second endpoint not UTF-8", DefaultDestinationNamespace, Result{Endpoints: []string{"10.0.0.1:80", bad}}, true},
		{"endpoint a truncated sequence", DefaultDestinationNamespace, Result{Endpoints: []string{"h\xe2\x82"}}, true},
		{"endpoint a surrogate half", DefaultDestinationNamespace, Result{Endpoints: []string{"h\xed\xa0\x80"}}, true},
		{"namespace not UTF-8", "envoy.lb" + bad, Result{Endpoints: eps}, true},
	}
	for _, tc := range cases {
		_, protoErr := proto.Marshal(pickResponse(tc.namespace, tc.res, 8192))
		if (protoErr != nil) != tc.refused {
			t.Fatalf("%s: the case is wrong: proto.Marshal error %v, want refused %v", tc.name, protoErr, tc.refused)
		}
		checkPickParity(t, tc.name, tc.namespace, tc.res, 8192)
	}
}

// FuzzEncodePick: whatever the endpoints, namespace, body length and extra
// header, the hand encoder refuses the pick exactly when proto.Marshal
// does, and what it writes decodes to pickResponse's message.
func FuzzEncodePick(f *testing.F) {
	f.Add("10.0.0.1:8000,10.0.0.2:8000", "envoy.lb", 8192, "x-prefiller-host-port", "10.0.0.3:8000")
	f.Add("a", "", -1, "", "")
	f.Add("10.0.0.1:80\xff", "envoy.lb", 1, "x-\xfe", "v\xff")
	f.Fuzz(func(t *testing.T, eps, namespace string, bodyLen int, key, value string) {
		res := Result{Endpoints: strings.Split(eps, ",")}
		if key != "" {
			res.Headers = map[string]string{key: value}
		}
		checkPickParity(t, "fuzz", namespace, res, bodyLen)
	})
}

// TestWireAnswersAtLengthBoundaries: every length prefix the encoder
// writes (the body's and each enclosing message's) is a varint that grows
// a byte at 128, 16384 and 2097152. Sweeping the body or the destination
// across each boundary makes every nesting level cross it in turn; a size
// computed a byte off would not decode, or leave the reserved room unused.
func TestWireAnswersAtLengthBoundaries(t *testing.T) {
	var h heads // one slab for the whole sweep: answers larger than it and slab changes included
	check := func(name string, a wireAnswer, want *extprocv3.ProcessingResponse) {
		t.Helper()
		if len(a.head) != cap(a.head) {
			t.Fatalf("%s: head of %d bytes in %d reserved", name, len(a.head), cap(a.head))
		}
		if got := decodeWire(t, a); !proto.Equal(got, want) {
			t.Fatalf("%s: the decoded answer differs from the proto package's", name)
		}
	}
	bodies := bytes.Repeat([]byte("b"), 1<<21+2)
	for _, boundary := range []int{1 << 7, 1 << 14, 1 << 21} {
		for n := boundary - 24; n <= boundary+2; n++ {
			body := bodies[:n]
			for _, eos := range []bool{false, true} {
				name := "chunk of " + strconv.Itoa(n) + " bytes, eos " + strconv.FormatBool(eos)
				check(name, encodeChunk(&h, fieldRespRequestBody, body, eos), requestChunk(body, eos))
				check(name, encodeChunk(&h, fieldRespResponseBody, body, eos), responseChunk(body, eos, true))
			}
		}
	}
	// The pick nests the destination five levels deep in the metadata, each
	// level adding under 64 bytes around it.
	for _, boundary := range []int{1 << 7, 1 << 14} {
		for n := max(1, boundary-320); n <= boundary+2; n++ {
			res := Result{Endpoints: []string{strings.Repeat("e", n)}}
			name := "pick to a " + strconv.Itoa(n) + "-byte destination"
			check(name, mustPick(&h, DefaultDestinationNamespace, res, n), pickResponse(DefaultDestinationNamespace, res, n))
		}
	}
}
