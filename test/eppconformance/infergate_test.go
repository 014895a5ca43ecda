package eppconformance

import (
	"context"
	"hash/fnv"
	"net"
	"runtime"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/epp"
)

// Headers through which the suite provokes refusals from the test picker.
const (
	headerShed        = "x-conformance-shed"
	headerUnavailable = "x-conformance-unavailable"
)

// affinityPicker is a deterministic picker for the suite: it hashes the first
// affinityPrefix bytes of the body (so the turns of one conversation, which
// share a long system prompt, land together), picks from the pool ∩ subset,
// and names the next eligible endpoint as the fallback.
type affinityPicker struct {
	pool []string

	mu     sync.Mutex
	served []string
}

const affinityPrefix = 256

func (p *affinityPicker) Pick(_ context.Context, r *epp.Request) (epp.Result, error) {
	if reason := r.Headers.Get(headerShed); reason != "" {
		return epp.Result{}, epp.Shed(reason)
	}
	if r.Headers.Get(headerUnavailable) != "" {
		return epp.Result{}, epp.Unavailable("no_ready_endpoint")
	}
	eligible := p.pool
	if r.Subset != nil {
		eligible = nil
		for _, e := range p.pool {
			for _, s := range r.Subset {
				if e == s {
					eligible = append(eligible, e)
				}
			}
		}
	}
	if len(eligible) == 0 {
		return epp.Result{}, epp.Unavailable("no_eligible_endpoint")
	}
	h := fnv.New32a()
	h.Write(r.Body[:min(len(r.Body), affinityPrefix)])
	i := int(h.Sum32() % uint32(len(eligible)))
	eps := []string{eligible[i]}
	if len(eligible) > 1 {
		eps = append(eps, eligible[(i+1)%len(eligible)])
	}
	return epp.Result{Endpoints: eps}, nil
}

func (p *affinityPicker) Served(o epp.Outcome) {
	if o.Endpoint == "" {
		return
	}
	p.mu.Lock()
	p.served = append(p.served, o.Endpoint)
	p.mu.Unlock()
}

func (p *affinityPicker) servedList() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.served...)
}

// TestInfergateEPP runs the suite against infergate's EPP server, in process,
// over loopback gRPC.
func TestInfergateEPP(t *testing.T) {
	pool := []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"}
	picker := &affinityPicker{pool: pool}
	opts := epp.DefaultOptions()
	srv, err := epp.New(opts, picker, epp.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
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
	go func() { served <- srv.Serve(ctx, lis, hlis) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	srv.SetReady(true)

	Run(t, Target{
		Addr:                lis.Addr().String(),
		HealthAddr:          hlis.Addr().String(),
		Pool:                pool,
		ShedHeaders:         map[string]string{headerShed: "queue_full"},
		UnavailableHeaders:  map[string]string{headerUnavailable: "1"},
		RefusalReasonHeader: opts.RefusalReasonHeader,
		Affinity:            true,
		Served:              picker.servedList,
		Goroutines:          func() (int, error) { return runtime.NumGoroutine(), nil },
	})
}
