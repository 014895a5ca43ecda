package epp

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// headCost is what a stream takes from the body budget for the request
// headers (and subset hint) of m.
func headCost(m *extprocv3.ProcessingRequest) int64 {
	subset, _, _ := decodeSubset(m.GetMetadataContext(), DefaultSubsetNamespace)
	_, held := decodeHeaders(m.GetRequestHeaders().GetHeaders())
	return held + heldSubsetBytes(subset)
}

// bigHeaders is a streamed request's headers with n extra headers of
// size bytes each.
func bigHeaders(n, size int) *extprocv3.ProcessingRequest {
	m := headersDeclaring(1)
	hm := m.GetRequestHeaders().GetHeaders()
	v := strings.Repeat("h", size)
	for i := range n {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: "x-filler-" + strconv.Itoa(i), RawValue: []byte(v)})
	}
	return m
}

// bigSubset is a streamed request's headers with a subset hint of n
// addresses, the two the test picker answers among them.
func bigSubset(n int) *extprocv3.ProcessingRequest {
	subset := append([]string(nil), twoEndpoints.Endpoints...)
	for i := range n {
		subset = append(subset, fmt.Sprintf("10.%d.%d.%d:8000", 1+i>>16, i>>8&255, i&255))
	}
	return withSubset(withConfig(reqHeaders(map[string]string{":path": "/v1/completions"}, false),
		extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED), subset...)
}

// A stream holds its request headers and subset hint from their arrival to
// its end, so they are taken from the body budget as its body is: streams
// that send large headers (a gRPC message may be MaxBodyBytes + 1 MiB)
// and then wait cannot pin memory past the budget. With room for three
// such streams, the fourth is answered 429 body_memory_exhausted, a small
// request still fits, and once the three end their share is given back.
func TestHeadersCountAgainstBodyBudget(t *testing.T) {
	cases := []struct {
		name    string
		headers *extprocv3.ProcessingRequest
	}{
		{"large headers", bigHeaders(16, 64<<10)},
		{"large subset hint", bigSubset(40000)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const (
				held  = 3
				body  = 2 << 10 // held by the picker
				small = 1 << 10 // answered at once
			)
			cost := headCost(tc.headers)
			if cost < 512<<10 {
				t.Fatalf("the headers cost %d B, want a large request", cost)
			}
			opts := DefaultOptions()
			opts.MaxBodyBytes, opts.BodyBudgetBytes = 1<<20, held*(cost+2*body)+8<<10
			p := newGatePicker(body, held+1)
			s, m, cc, ctx := boundedServer(t, opts, p)

			open := func() *boundsStream { return openWithHeaders(ctx, t, cc, tc.headers, body, body) }
			var streams []*boundsStream
			for i := range held {
				streams = append(streams, awaitHeld(t, p, open(), fmt.Sprintf("stream %d within the budget", i)))
			}
			over := open()
			select {
			case a := <-over.first:
				status, reason, err := refusalOf(a)
				if err != nil || status != 429 || reason != ReasonBodyMemory {
					t.Fatalf("stream past the budget: answered %d %q (%v), want 429 %s", status, reason, err, ReasonBodyMemory)
				}
			case <-p.entered:
				t.Fatalf("stream past the budget reached the picker: %d B of headers held by %d streams, budget %d B", cost, held+1, opts.BodyBudgetBytes)
			case <-time.After(30 * time.Second):
				t.Fatal("stream past the budget neither picked nor refused within 30 s")
			}
			if got := counterValue(m.Bounded.WithLabelValues(BoundBodyMemory)); got != 1 {
				t.Errorf("bound refusals counted %v, want 1", got)
			}
			sm := openRequest(ctx, t, cc, small, small, true)
			if err := sm.finishPicked(ctx, small); err != nil {
				t.Fatalf("small request beside the held ones: %v", err)
			}
			releaseHeld(ctx, t, p, streams, body, &s.bodies)
		})
	}
}
