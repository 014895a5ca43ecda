package epp

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// fixedPicker is the trivial picker of the benchmarks: it measures the
// protocol cost, not a ladder.
type fixedPicker struct{ res Result }

func (p fixedPicker) Pick(context.Context, *Request) (Result, error) { return p.res, nil }
func (fixedPicker) Served(Outcome)                                   {}

// benchRequest is a GIE-shaped request: the headers Envoy sends for a chat
// completion and an 8 KB body in one chunk.
func benchRequest() []*extprocv3.ProcessingRequest {
	body := `{"model":"llama","messages":[{"role":"user","content":"` + strings.Repeat("tell me more ", 8<<10/13) + `"}]}`
	return []*extprocv3.ProcessingRequest{
		reqHeaders(map[string]string{
			":method": "POST", ":path": "/v1/chat/completions", ":authority": "gw.example", ":scheme": "http",
			"content-type": "application/json", "content-length": strconv.Itoa(len(body)), "user-agent": "bench",
			"x-request-id": "0f9c7e1a", "x-forwarded-for": "10.1.2.3", HeaderObjective: "standard",
		}, false),
		reqBody(body, true),
	}
}

// scriptStream replays one request and discards the answers.
type scriptStream struct {
	grpc.ServerStream
	msgs []*extprocv3.ProcessingRequest
	i    int
	sent int
}

func (s *scriptStream) Context() context.Context { return context.Background() }
func (s *scriptStream) Send(*extprocv3.ProcessingResponse) error {
	s.sent++
	return nil
}
func (s *scriptStream) SendMsg(any) error {
	s.sent++
	return nil
}
func (s *scriptStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if s.i == len(s.msgs) {
		return nil, io.EOF
	}
	s.i++
	return s.msgs[s.i-1], nil
}

// BenchmarkProcess is the EPP's own cost per pick (headers + 8 KB body in,
// pick and re-emitted body out), without gRPC: allocs/op is ours alone.
func BenchmarkProcess(b *testing.B) {
	s, err := New(DefaultOptions(), fixedPicker{twoEndpoints}, nil)
	if err != nil {
		b.Fatal(err)
	}
	msgs := benchRequest()
	st := &scriptStream{msgs: msgs}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		st.i, st.sent = 0, 0
		if err := s.Process(st); err != nil || st.sent != 2 {
			b.Fatalf("Process = %v after %d answers", err, st.sent)
		}
	}
	reportCPU(b, cpu)
}

// cpuTime is the process's user+system CPU time. On a shared machine wall
// time per op mostly measures the neighbours; CPU time per op is what a pick
// costs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports CPU µs per op since start (GC and, for the loopback
// benchmarks, the in-process client's side included).
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	}
}

// BenchmarkPickLoopback is the pick latency a proxy sees over loopback gRPC:
// from sending the headers to receiving the pick, for headers + 8 KB body,
// one stream at a time. It reports p50/p99 alongside ns/op.
func BenchmarkPickLoopback(b *testing.B) {
	cc := benchServer(b)
	msgs := benchRequest()
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		start := time.Now()
		if err := oneExchange(cc, msgs, func() { lat = append(lat, time.Since(start)) }); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
	reportPercentiles(b, lat)
}

// BenchmarkPickLoopbackParallel is throughput: many streams at once over one
// connection, as a proxy worker would hold them.
func BenchmarkPickLoopbackParallel(b *testing.B) {
	cc := benchServer(b)
	msgs := benchRequest()
	b.ReportAllocs()
	start, cpu := time.Now(), cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := oneExchange(cc, msgs, func() {}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "picks/s")
	reportCPU(b, cpu)
}

func benchServer(b *testing.B) *grpc.ClientConn {
	b.Helper()
	s, err := New(DefaultOptions(), fixedPicker{twoEndpoints}, nil)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis, hlis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cc.Close()
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	return cc
}

// oneExchange runs one request phase; picked is called when the pick arrives.
func oneExchange(cc *grpc.ClientConn, msgs []*extprocv3.ProcessingRequest, picked func()) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	r, err := st.Recv()
	if err != nil {
		return err
	}
	if r.GetRequestHeaders() == nil {
		return errors.New("first answer is not the pick")
	}
	picked()
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
