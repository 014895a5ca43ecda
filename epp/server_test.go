package epp

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestNewRejects(t *testing.T) {
	if _, err := New(DefaultOptions(), nil, nil); err == nil {
		t.Error("New without a picker succeeded")
	}
	bad := DefaultOptions()
	bad.MaxBodyBytes = -1
	if _, err := New(bad, &recordingPicker{}, nil); err == nil {
		t.Error("New with invalid options succeeded")
	}
}

func TestRunListenError(t *testing.T) {
	opts := DefaultOptions()
	opts.Addr = "256.0.0.1:1" // cannot listen
	s, err := New(opts, &recordingPicker{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "epp: listen") {
		t.Errorf("Run = %v, want a listen error", err)
	}
}

// Health: liveness from the start, readiness and ext_proc only after
// SetReady; Serve returns on cancel and leaves no goroutine behind.
func TestServeHealthAndShutdown(t *testing.T) {
	before := runtime.NumGoroutine()
	s, _ := newTestServer(t, &recordingPicker{result: twoEndpoints})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, lis, hlis) }()

	cc, err := grpc.NewClient(hlis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	hc := healthpb.NewHealthClient(cc)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		r, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("check %q: %v", svc, err)
		}
		return r.GetStatus()
	}
	want := map[string]healthpb.HealthCheckResponse_ServingStatus{
		HealthLiveness: healthpb.HealthCheckResponse_SERVING, HealthReadiness: healthpb.HealthCheckResponse_NOT_SERVING, HealthExtProc: healthpb.HealthCheckResponse_NOT_SERVING,
	}
	for svc, st := range want {
		if got := check(svc); got != st {
			t.Errorf("before ready: %s = %s, want %s", svc, got, st)
		}
	}
	s.SetReady(true)
	for svc := range want {
		if got := check(svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("after ready: %s = %s, want SERVING", svc, got)
		}
	}
	cc.Close()
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve = %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after Serve returned:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// The exposition of the EPP families is what dashboards key on.
func TestMetricsExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	s, err := New(DefaultOptions(), &recordingPicker{result: twoEndpoints}, m)
	if err != nil {
		t.Fatal(err)
	}
	d := drive(t, s)
	d.feed(reqHeaders(nil, true))
	if err := d.end(); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	text := b.String()
	for _, want := range []string{
		"# TYPE infergate_epp_streams_total counter",
		`infergate_epp_streams_total{result="picked"} 1`,
		"# TYPE infergate_epp_active_streams gauge",
		"infergate_epp_active_streams 0",
		"# TYPE infergate_epp_pick_duration_seconds histogram",
		"infergate_epp_pick_duration_seconds_count 1",
		"# TYPE infergate_epp_served_total counter",
		`infergate_epp_served_total{match="unreported"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q:\n%s", want, text)
		}
	}
}
