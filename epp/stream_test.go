package epp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var twoEndpoints = Result{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}}

// The pick is held until the body ends: nothing is sent while chunks arrive,
// then the headers answer, then every chunk unchanged and in order, the last
// one carrying end_of_stream, and the picker saw the whole body.
func TestPickHeldUntilBodyEnds(t *testing.T) {
	p := &recordingPicker{result: twoEndpoints}
	s, m := newTestServer(t, p)
	d := drive(t, s)
	parts := []string{`{"model":"m",`, `"messages":[`, `]}`}

	d.feed(withConfig(reqHeaders(map[string]string{":path": "/v1/chat/completions"}, false),
		extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED))
	for i, part := range parts {
		d.feed(reqBody(part, i == len(parts)-1))
		if i < len(parts)-1 {
			d.idle()
			if n := len(d.f.sent()); n != 0 {
				t.Fatalf("after chunk %d of %d: %d answers sent, want the headers answer held", i+1, len(parts), n)
			}
		}
	}
	d.idle()
	out := d.f.sent()
	if len(out) != 1+len(parts) {
		t.Fatalf("sent %d answers, want the headers answer and %d chunks", len(out), len(parts))
	}
	hs := setHeaders(t, out[0])
	if got, want := hs[HeaderDestination], "10.0.0.1:8000,10.0.0.2:8000"; got != want {
		t.Errorf("%s = %q, want %q", HeaderDestination, got, want)
	}
	md := out[0].GetDynamicMetadata().GetFields()[DefaultDestinationNamespace].GetStructValue().GetFields()[HeaderDestination].GetStringValue()
	if md != hs[HeaderDestination] {
		t.Errorf("metadata %q differs from header %q", md, hs[HeaderDestination])
	}
	if !out[0].GetRequestHeaders().GetResponse().GetClearRouteCache() {
		t.Error("clear_route_cache not set")
	}
	whole := strings.Join(parts, "")
	if got := hs["content-length"]; got != strconv.Itoa(len(whole)) {
		t.Errorf("content-length = %q, want %d", got, len(whole))
	}
	for i, part := range parts {
		sr := out[1+i].GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if string(sr.GetBody()) != part || sr.GetEndOfStream() != (i == len(parts)-1) {
			t.Errorf("chunk %d = %q eos=%v, want %q eos=%v", i, sr.GetBody(), sr.GetEndOfStream(), part, i == len(parts)-1)
		}
	}
	if err := d.end(); err != nil {
		t.Fatalf("Process = %v, want OK", err)
	}
	if len(p.requests) != 1 || string(p.requests[0].Body) != whole {
		t.Fatalf("picker saw %d requests, body %q; want one with %q", len(p.requests), p.requests[0].Body, whole)
	}
	if len(p.outcomes) != 1 || p.outcomes[0].Complete || p.outcomes[0].Err != nil {
		t.Errorf("outcomes = %+v, want one, incomplete, no error (the proxy skipped the response)", p.outcomes)
	}
	if got := streamsCount(m, ResultPicked); got != 1 {
		t.Errorf("streams{picked} = %v, want 1", got)
	}
	if got := testMetricServed(m, ServedUnreported); got != 1 {
		t.Errorf("served{unreported} = %v, want 1", got)
	}
}

// Trailers end the body: no chunk carries end_of_stream, a trailers answer
// follows, and content-length is left to chunked framing.
func TestTrailersEndTheBody(t *testing.T) {
	p := &recordingPicker{result: twoEndpoints}
	s, _ := newTestServer(t, p)
	d := drive(t, s)
	d.feed(reqHeaders(nil, false))
	d.feed(reqBody("ab", false))
	d.feed(reqBody("cd", false))
	d.feed(reqTrailers())
	if err := d.end(); err != nil {
		t.Fatal(err)
	}
	out := d.f.sent()
	if len(out) != 4 || out[3].GetRequestTrailers() == nil {
		t.Fatalf("answers %v: want headers, 2 chunks, trailers", out)
	}
	for _, a := range out[1:3] {
		if a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			t.Error("a chunk carries end_of_stream although trailers end the body")
		}
	}
	if _, ok := setHeaders(t, out[0])["content-length"]; ok {
		t.Error("content-length set for a body that ends in trailers")
	}
	if string(p.requests[0].Body) != "abcd" {
		t.Errorf("picker saw %q", p.requests[0].Body)
	}
}

// The whole exchange with the response path: the served report, the status
// and completion reach the picker once; response chunks are re-emitted.
func TestServedOutcome(t *testing.T) {
	p := &recordingPicker{result: twoEndpoints}
	s, m := newTestServer(t, p)
	d := drive(t, s)
	d.feed(reqHeaders(map[string]string{":method": "GET"}, true))
	d.feed(respHeaders("200", "10.0.0.2:8000", false))
	d.feed(respBody("data: a\n\n", false))
	d.feed(respBody("data: [DONE]\n\n", true))
	if err := d.end(); err != nil {
		t.Fatal(err)
	}
	out := d.f.sent()
	if len(out) != 4 || out[1].GetResponseHeaders() == nil {
		t.Fatalf("answers: %v", out)
	}
	if got := out[3].GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); string(got.GetBody()) != "data: [DONE]\n\n" || !got.GetEndOfStream() {
		t.Errorf("last response chunk = %q eos=%v", got.GetBody(), got.GetEndOfStream())
	}
	if len(p.outcomes) != 1 {
		t.Fatalf("%d outcomes, want 1", len(p.outcomes))
	}
	o := p.outcomes[0]
	if o.Endpoint != "10.0.0.2:8000" || o.Status != 200 || !o.Complete || o.Err != nil {
		t.Errorf("outcome = %+v", o)
	}
	if got := testMetricServed(m, ServedFallback); got != 1 {
		t.Errorf("served{fallback} = %v, want 1", got)
	}
}

// A buffered response-body mode is acknowledged without a body mutation.
func TestBufferedResponseBodyPassesThrough(t *testing.T) {
	s, _ := newTestServer(t, &recordingPicker{result: twoEndpoints})
	d := drive(t, s)
	d.feed(withConfig(reqHeaders(nil, true), extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_BUFFERED))
	d.feed(respHeaders("200", "", false))
	d.feed(respBody("whole", true))
	if err := d.end(); err != nil {
		t.Fatal(err)
	}
	out := d.f.sent()
	if len(out) != 3 || out[2].GetResponseBody() == nil || out[2].GetResponseBody().GetResponse().GetBodyMutation() != nil {
		t.Fatalf("answers %v: want a bare body answer last", out)
	}
}

// The client cannot smuggle a destination: ours overwrites, and the picker's
// extra headers ride along.
func TestPickHeadersOverwrite(t *testing.T) {
	p := &recordingPicker{result: Result{Endpoints: []string{"10.0.0.1:8000"}, Headers: map[string]string{"X-Prefiller-Host-Port": "10.0.0.9:8000"}}}
	s, _ := newTestServer(t, p)
	d := drive(t, s)
	d.feed(reqHeaders(map[string]string{HeaderDestination: "6.6.6.6:1"}, true))
	if err := d.end(); err != nil {
		t.Fatal(err)
	}
	hs := setHeaders(t, d.f.sent()[0])
	if hs[HeaderDestination] != "10.0.0.1:8000" || hs["x-prefiller-host-port"] != "10.0.0.9:8000" {
		t.Errorf("set headers = %v", hs)
	}
}

// Hints reach the picker parsed.
func TestHintsReachPicker(t *testing.T) {
	p := &recordingPicker{result: twoEndpoints}
	s, _ := newTestServer(t, p)
	d := drive(t, s)
	d.feed(reqHeaders(map[string]string{
		HeaderObjective: "critical", HeaderFairnessID: "tenant-a", HeaderModelName: "llama-lora",
		HeaderSLOTTFT: "250", HeaderSLOTPOT: "12.5",
	}, true))
	if err := d.end(); err != nil {
		t.Fatal(err)
	}
	got := p.requests[0].Hints
	want := Hints{Objective: "critical", FairnessID: "tenant-a", ModelName: "llama-lora", TTFT: 250e6, TPOT: 12.5e6}
	if got != want {
		t.Errorf("hints = %+v, want %+v", got, want)
	}
}

// Every way a stream can go wrong ends cleanly: the right gRPC status or HTTP
// answer, the right result label, and Served owed only for real picks.
func TestStreamFailures(t *testing.T) {
	genericErr := errors.New("ladder exploded")
	cases := []struct {
		name       string
		picker     *recordingPicker
		opts       func(*Options)
		msgs       []*extprocv3.ProcessingRequest
		cancel     bool // cancel the stream after feeding msgs
		noClose    bool // the server ends the stream itself
		wantCode   codes.Code
		wantStatus int    // ImmediateResponse status; 0 = none
		wantResult string // streams_total label
		wantServed int    // Served calls
		wantDest   string // the destination header, when checked
	}{
		{name: "body before headers", msgs: msgs(reqBody("x", true)), noClose: true, wantCode: codes.InvalidArgument, wantResult: ResultMalformed},
		{name: "headers twice", msgs: msgs(reqHeaders(nil, false), reqHeaders(nil, false)), noClose: true, wantCode: codes.InvalidArgument, wantResult: ResultMalformed},
		{name: "empty message", msgs: msgs(&extprocv3.ProcessingRequest{}), noClose: true, wantCode: codes.InvalidArgument, wantResult: ResultMalformed},
		{name: "flow-control-only message ignored", msgs: msgs(&extprocv3.ProcessingRequest{ClientWindowUpdate: &extprocv3.ProcessingRequest_ClientWindowUpdate{}}, reqHeaders(nil, true)), wantResult: ResultPicked, wantServed: 1},
		{name: "buffered request body mode", msgs: msgs(withConfig(reqHeaders(nil, false), extprocfilterv3.ProcessingMode_BUFFERED, 0)), noClose: true, wantCode: codes.FailedPrecondition, wantResult: ResultMalformed},
		{name: "observability mode", msgs: msgs(&extprocv3.ProcessingRequest{ObservabilityMode: true, Request: reqHeaders(nil, true).Request}), noClose: true, wantCode: codes.FailedPrecondition, wantResult: ResultMalformed},
		{name: "no request body mode picks on headers", msgs: msgs(withConfig(reqHeaders(nil, false), extprocfilterv3.ProcessingMode_NONE, 0)), wantResult: ResultPicked, wantServed: 1},
		{name: "subset hint not a list", msgs: msgs(func() *extprocv3.ProcessingRequest {
			m := withSubset(reqHeaders(nil, true), "10.0.0.1:8000")
			m.MetadataContext.FilterMetadata[DefaultSubsetNamespace].Fields[KeySubset] = nil
			return m
		}()), noClose: true, wantCode: codes.InvalidArgument, wantResult: ResultMalformed},
		{name: "empty subset", msgs: msgs(withSubset(reqHeaders(nil, true))), noClose: true, wantStatus: 503, wantResult: ResultUnavailable},
		{name: "pick outside the subset", msgs: msgs(withSubset(reqHeaders(nil, true), "10.0.0.7:8000")), noClose: true, wantStatus: 503, wantResult: ResultUnavailable, wantServed: 1},
		{name: "subset keeps the eligible fallback", msgs: msgs(withSubset(reqHeaders(nil, true), "10.0.0.2:8000")), wantResult: ResultPicked, wantServed: 1},
		{name: "fallbacks capped", opts: func(o *Options) { o.MaxEndpoints = 1 }, msgs: msgs(reqHeaders(nil, true)), wantResult: ResultPicked, wantServed: 1, wantDest: "10.0.0.1:8000"},
		{name: "shed", picker: &recordingPicker{err: Shed("queue_full")}, msgs: msgs(reqHeaders(nil, true)), noClose: true, wantStatus: 429, wantResult: ResultShed},
		{name: "no ready endpoint", picker: &recordingPicker{err: Unavailable("no_ready_endpoint")}, msgs: msgs(reqHeaders(nil, true)), noClose: true, wantStatus: 503, wantResult: ResultUnavailable},
		{name: "empty pick", picker: &recordingPicker{}, msgs: msgs(reqHeaders(nil, true)), noClose: true, wantStatus: 503, wantResult: ResultUnavailable, wantServed: 1},
		{name: "picker error", picker: &recordingPicker{err: genericErr}, msgs: msgs(reqHeaders(nil, true)), noClose: true, wantCode: codes.Internal, wantResult: ResultError},
		{name: "picked endpoint not UTF-8", picker: &recordingPicker{result: Result{Endpoints: []string{"10.0.0.1:8000\xff"}}}, msgs: msgs(reqHeaders(nil, true)), noClose: true, wantCode: codes.Internal, wantResult: ResultError, wantServed: 1},
		{name: "picker header value not UTF-8 (raw_value bytes)", picker: &recordingPicker{result: Result{Endpoints: []string{"10.0.0.1:8000"}, Headers: map[string]string{"x-hint": "caf\xe9"}}}, msgs: msgs(reqHeaders(nil, true)), wantResult: ResultPicked, wantServed: 1, wantDest: "10.0.0.1:8000"},
		{name: "bad ttft hint", msgs: msgs(reqHeaders(map[string]string{HeaderSLOTTFT: "soon"}, true)), noClose: true, wantStatus: 400, wantResult: ResultRefused},
		{name: "body over the limit", opts: func(o *Options) { o.MaxBodyBytes = 4 }, msgs: msgs(reqHeaders(nil, false), reqBody("abc", false), reqBody("de", false)), noClose: true, wantStatus: 413, wantResult: ResultRefused},
		{name: "body at the limit", opts: func(o *Options) { o.MaxBodyBytes = 4 }, msgs: msgs(reqHeaders(nil, false), reqBody("abcd", true)), wantResult: ResultPicked, wantServed: 1},
		{name: "declared length far beyond the body", msgs: msgs(reqHeaders(map[string]string{"content-length": "999999999999"}, false), reqBody("abc", true)), wantResult: ResultPicked, wantServed: 1},
		{name: "closed before anything", msgs: nil, wantResult: ResultCanceled},
		{name: "closed mid-body", msgs: msgs(reqHeaders(nil, false), reqBody("{", false)), wantCode: codes.Aborted, wantResult: ResultCanceled},
		{name: "cancelled mid-body", msgs: msgs(reqHeaders(nil, false), reqBody("{", false)), cancel: true, wantCode: codes.Canceled, wantResult: ResultCanceled},
		{name: "cancelled mid-response", msgs: msgs(reqHeaders(nil, true), respHeaders("200", "", false)), cancel: true, wantCode: codes.Canceled, wantResult: ResultPicked, wantServed: 1},
		{name: "response headers before the request ended", msgs: msgs(reqHeaders(nil, false), respHeaders("200", "", false)), noClose: true, wantCode: codes.InvalidArgument, wantResult: ResultMalformed},
		{name: "message after the response ended", msgs: msgs(reqHeaders(nil, true), respHeaders("200", "", true), respBody("x", true)), noClose: true, wantCode: codes.InvalidArgument, wantResult: ResultMalformed, wantServed: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.picker
			if p == nil {
				p = &recordingPicker{result: twoEndpoints}
			}
			var mut []func(*Options)
			if tc.opts != nil {
				mut = append(mut, tc.opts)
			}
			s, m := newTestServer(t, p, mut...)
			d := drive(t, s)
			for _, msg := range tc.msgs {
				if !d.feed(msg) {
					break
				}
			}
			var err error
			switch {
			case tc.cancel:
				d.idle()
				d.cancel()
				err = d.result()
			case tc.noClose:
				err = d.result()
			default:
				err = d.end()
			}
			if got := status.Code(err); got != tc.wantCode {
				t.Errorf("Process = %v, want code %s", err, tc.wantCode)
			}
			var immediate *extprocv3.ImmediateResponse
			for _, a := range d.f.sent() {
				if ir := a.GetImmediateResponse(); ir != nil {
					immediate = ir
				}
			}
			if tc.wantDest != "" {
				if got := setHeaders(t, d.f.sent()[0])[HeaderDestination]; got != tc.wantDest {
					t.Errorf("destination = %q, want %q", got, tc.wantDest)
				}
			}
			if got := int(immediate.GetStatus().GetCode()); got != tc.wantStatus {
				t.Errorf("immediate status = %d, want %d", got, tc.wantStatus)
			}
			if immediate != nil && len(immediate.GetHeaders().GetSetHeaders()) == 0 {
				t.Error("immediate response without a reason header")
			}
			if got := streamsCount(m, tc.wantResult); got != 1 {
				t.Errorf("streams{%s} = %v, want 1", tc.wantResult, got)
			}
			if len(p.outcomes) != tc.wantServed {
				t.Errorf("Served called %d times, want %d", len(p.outcomes), tc.wantServed)
			}
		})
	}
}

func msgs(m ...*extprocv3.ProcessingRequest) []*extprocv3.ProcessingRequest { return m }

// A large body in many chunks comes back byte for byte, chunk for chunk.
func TestManyChunksReemittedOneToOne(t *testing.T) {
	p := &recordingPicker{result: twoEndpoints}
	s, _ := newTestServer(t, p)
	d := drive(t, s)
	d.feed(reqHeaders(nil, false))
	var want bytes.Buffer
	const n = 200
	for i := range n {
		chunk := strings.Repeat(strconv.Itoa(i%10), 1+i%97)
		want.WriteString(chunk)
		d.feed(reqBody(chunk, i == n-1))
	}
	if err := d.end(); err != nil {
		t.Fatal(err)
	}
	out := d.f.sent()
	if len(out) != 1+n {
		t.Fatalf("%d answers, want %d", len(out), 1+n)
	}
	var got bytes.Buffer
	for _, a := range out[1:] {
		got.Write(a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) || !bytes.Equal(p.requests[0].Body, want.Bytes()) {
		t.Error("re-emitted body or picked body differs from the body sent")
	}
}

// The picker gets the stream's context: a cancelled stream cancels the pick.
func TestPickSeesCancellation(t *testing.T) {
	s, m := newTestServer(t, pickerFunc(func(ctx context.Context, _ *Request) (Result, error) {
		<-ctx.Done()
		return Result{}, ctx.Err()
	}))
	d := drive(t, s)
	d.feed(reqHeaders(nil, false))
	d.feed(reqBody("x", true))
	d.cancel()
	if err := d.result(); status.Code(err) != codes.Canceled {
		t.Errorf("Process = %v, want Canceled", err)
	}
	if got := streamsCount(m, ResultCanceled); got != 1 {
		t.Errorf("streams{canceled} = %v", got)
	}
}

type pickerFunc func(context.Context, *Request) (Result, error)

func (f pickerFunc) Pick(ctx context.Context, r *Request) (Result, error) { return f(ctx, r) }
func (f pickerFunc) Served(Outcome)                                       {}

// flowShed is a flow-control package's own shed error: it implements
// Shedder without knowing package epp.
type flowShed struct{ reason string }

func (e flowShed) Error() string      { return "flow control: " + e.reason }
func (e flowShed) ShedReason() string { return e.reason }

// A shed decision from the picker's flow control, whatever its type and
// however wrapped, is a 429 with its reason in the reason header and the
// body; no pick is owed a Served.
func TestShedderAnswered429(t *testing.T) {
	cases := []struct {
		name, wantReason string
		err              error
	}{
		{"epp.Shed", "queue_full", Shed("queue_full")},
		{"own type", "sheddable_saturated", flowShed{"sheddable_saturated"}},
		{"wrapped", "queue_wait_expired", fmt.Errorf("admit critical: %w", flowShed{"queue_wait_expired"})},
		{"empty reason", "shed", flowShed{""}},
		{"reason not UTF-8 (header and body are bytes)", "caf\xe9", flowShed{"caf\xe9"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &recordingPicker{err: tc.err}
			s, m := newTestServer(t, p)
			d := drive(t, s)
			d.feed(reqHeaders(nil, true))
			if err := d.result(); err != nil {
				t.Fatalf("Process = %v, want OK after the immediate response", err)
			}
			out := d.f.sent()
			if len(out) != 1 || out[0].GetImmediateResponse() == nil {
				t.Fatalf("answers %v, want one immediate response", out)
			}
			ir := out[0].GetImmediateResponse()
			hs := map[string]string{}
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				hs[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
			}
			if ir.GetStatus().GetCode() != 429 || hs[DefaultRefusalReasonHeader] != tc.wantReason || string(ir.GetBody()) != tc.wantReason+"\n" {
				t.Errorf("status %d, reason header %q, body %q; want 429 %q", ir.GetStatus().GetCode(), hs[DefaultRefusalReasonHeader], ir.GetBody(), tc.wantReason)
			}
			if got := streamsCount(m, ResultShed); got != 1 {
				t.Errorf("streams{shed} = %v, want 1", got)
			}
			if len(p.outcomes) != 0 {
				t.Errorf("Served called %d times for a shed request", len(p.outcomes))
			}
		})
	}
}

// The served report is kept without pinning the message it came in: the
// pick's own string when it names a picked endpoint, a copy of another
// short one, and a placeholder for one longer than any address.
func TestKeepServed(t *testing.T) {
	picked := []string{"10.0.0.1:8000", "10.0.0.2:8000"}
	// Reports as slices of a larger message, the way decodeHeaders hands them out.
	msg := "x-other: 1\n" + picked[1] + "\n10.9.9.9:1\n" + strings.Repeat("h", 1<<20)
	cases := []struct {
		name     string
		report   string
		want     string
		sameData string // the string whose bytes the kept report must share; "" for a fresh copy
	}{
		{"names a picked endpoint", msg[11 : 11+len(picked[1])], picked[1], picked[1]},
		{"names another endpoint", msg[12+len(picked[1]) : 12+len(picked[1])+10], "10.9.9.9:1", ""},
		{"longer than any address", msg[11:], servedTooLong, servedTooLong},
		{"unreported", "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := keepServed(tc.report, picked)
			if got != tc.want {
				t.Fatalf("kept %.40q, want %q", got, tc.want)
			}
			if got == "" {
				return
			}
			if tc.sameData != "" && unsafe.StringData(got) != unsafe.StringData(tc.sameData) {
				t.Error("the kept report is not the pick's own string")
			}
			if unsafe.StringData(got) == unsafe.StringData(tc.report) {
				t.Error("the kept report still points into the message it came in")
			}
		})
	}
	if got := servedMatch(Outcome{Result: Result{Endpoints: picked}, Endpoint: keepServed(msg[11:], picked)}); got != ServedOther {
		t.Errorf("a report longer than any address is counted %q, want %q", got, ServedOther)
	}
}
