package datapath

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

var eppMemoryPicks = flag.Int("epp-memory-picks", 0,
	"TestEPPMemoryFlat: picks per pool in the measured phase (0: 40,000, 4,000 under the race detector; the full-size run is 1000000)")

// scriptedStream replays one ext_proc stream into epp.Server.Process without
// gRPC, so a memory test can afford hundreds of thousands of streams.
type scriptedStream struct {
	grpc.ServerStream
	msgs []*extprocv3.ProcessingRequest
	i    int
	sent int
}

func (s *scriptedStream) Context() context.Context { return context.Background() }
func (s *scriptedStream) Send(*extprocv3.ProcessingResponse) error {
	s.sent++
	return nil
}
func (s *scriptedStream) SendMsg(any) error {
	s.sent++
	return nil
}
func (s *scriptedStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if s.i == len(s.msgs) {
		return nil, io.EOF
	}
	s.i++
	return s.msgs[s.i-1], nil
}

// eppExchange is one request as Envoy streams it (headers with a
// conversation id, a chat body in one chunk) and its response headers.
func eppExchange(conv int) []*extprocv3.ProcessingRequest {
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":"conversation %d %01000d"},{"role":"user","content":"turn"}]}`, conv, conv)
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	return []*extprocv3.ProcessingRequest{
		{
			Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				hv(":method", "POST"), hv(":path", "/v1/chat/completions"), hv(":authority", "gw"),
				hv("content-length", strconv.Itoa(len(body))), hv("x-conversation-id", "conv-"+strconv.Itoa(conv)),
				hv("x-forwarded-for", "10.9.8."+strconv.Itoa(conv%250)),
			}}}},
			ProtocolConfig: &extprocv3.ProtocolConfiguration{
				RequestBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			},
		},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv(":status", "200")}}, EndOfStream: true,
		}}},
	}
}

// liveHeap is the heap still reachable after two collections (the second
// frees what the first one's finalizers released).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestEPPMemoryFlat: the EPP's memory does not grow with picks. Whole
// streams (the epp server's state machine and the rule's own selection,
// Served settling every pick) run over a fixed population of conversations
// until every bounded structure (session pins, the prefix index, breaker
// and load state) has met all of them; then the live heap after GC must
// stay put over -epp-memory-picks more picks, within 2 bytes per pick (a
// leak of one small object per pick is 16 bytes or more). The full-size
// run of a million picks per pool is
//
//	go test -run TestEPPMemoryFlat -v -timeout 30m ./datapath -args -epp-memory-picks=1000000
func TestEPPMemoryFlat(t *testing.T) {
	const conversations = 512
	pools := []struct {
		name  string
		setup func(t *testing.T) (*Runtime, *spec.Rule)
	}{
		{"chwbl", func(t *testing.T) (*Runtime, *spec.Rule) {
			rt, _ := newTestRuntime(t, testOptions())
			return rt, chwblRule(t, rt, 4)
		}},
		{"pd-2p2d-cache-aware", func(t *testing.T) (*Runtime, *spec.Rule) {
			f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 2, 2, func(r *spec.Rule) { r.PD.CacheAware = true })
			return f.rt, f.rule
		}},
	}
	for _, pool := range pools {
		t.Run(pool.name, func(t *testing.T) {
			rt, r := pool.setup(t)
			srv, err := epp.New(epp.DefaultOptions(), rt.EPPPicker(r.Name), epp.NewMetrics(prometheus.NewRegistry()))
			if err != nil {
				t.Fatal(err)
			}
			scripts := make([][]*extprocv3.ProcessingRequest, conversations)
			for i := range scripts {
				scripts[i] = eppExchange(i)
			}
			run := func(n int) {
				st := &scriptedStream{}
				for k := range n {
					st.msgs, st.i, st.sent = scripts[k%conversations], 0, 0
					if err := srv.Process(st); err != nil || st.sent != 3 {
						t.Fatalf("stream %d: %v after %d answers, want OK after the pick, the body and the response headers", k, err, st.sent)
					}
				}
			}
			warm := 8
			if raceDetector {
				warm = 2
			}
			run(warm * conversations) // every conversation seen, every structure at its steady size
			before, start := liveHeap(), time.Now()
			n := *eppMemoryPicks
			if n <= 0 {
				n = 40_000
				if raceDetector {
					n = 4_000
				}
			}
			run(n)
			after := liveHeap()
			runtime.KeepAlive(scripts) // else the requests themselves are freed before the second reading
			growth := float64(int64(after)-int64(before)) / float64(n)
			t.Logf("%d picks in %v: live heap %d → %d bytes (%+.3f bytes per pick)", n, time.Since(start).Round(time.Millisecond), before, after, growth)
			if growth > 2 {
				t.Errorf("live heap grew %.2f bytes per pick over %d picks (%d → %d): something is kept per pick", growth, n, before, after)
			}
			assertSettled(t, rt.rules[r.Key].cur.Load())
		})
	}
}

// BenchmarkEPPStream: one whole ext_proc stream (headers, a chat body in
// one chunk, the pick, the re-emitted body, response headers, Served) on a
// CHWBL pool of 16 endpoints, without gRPC: the EPP's share of a pick with
// the real selection behind it, allocations included.
func BenchmarkEPPStream(b *testing.B) {
	rt, r := chwblBenchRule(b)
	srv, err := epp.New(epp.DefaultOptions(), rt.EPPPicker(r.Name), epp.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	scripts := make([][]*extprocv3.ProcessingRequest, 64)
	for i := range scripts {
		scripts[i] = eppExchange(i)
	}
	st := &scriptedStream{}
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		st.msgs, st.i, st.sent = scripts[k%len(scripts)], 0, 0
		k++
		if err := srv.Process(st); err != nil || st.sent != 3 {
			b.Fatalf("stream: %v after %d answers", err, st.sent)
		}
	}
}
