package datapath

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/test/eppconformance"
	"github.com/infergate/infergate/test/extprocclient"
	"google.golang.org/grpc"
)

// eppFlowRule installs a round-robin pool of n fake engines with
// admission window win each, and serves its endpoint picker over loopback
// gRPC. The engines are never sent to: in this mode the proxy in front
// does the sending.
func eppFlowRule(t *testing.T, o Options, win, n int) (*Runtime, *spec.Rule, *metrics.Metrics, *grpc.ClientConn) {
	t.Helper()
	eps := fakeEndpoints(t, "w", n)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, eps...)
	r.Name = "epp-flow"
	r.AdmissionWindow = win
	rt, m := installWithMetrics(t, o, r)
	_, addr, _ := serveEPP(t, rt.EPPPicker(r.Name), true)
	cc, err := extprocclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rt, r, m, cc
}

// eppStart opens an ext_proc stream for a chat completion with the given
// extra headers (lower-case name, value pairs); the pick is read with Pick.
func eppStart(t *testing.T, ctx context.Context, cc *grpc.ClientConn, kv ...string) *extprocclient.Exchange {
	t.Helper()
	hs := extprocclient.Headers(append([]string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw"}, kv...)...)
	x, err := extprocclient.Start(ctx, cc, extprocclient.Request{
		Headers: hs, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// eppHold opens a stream and reads its pick, keeping the stream (and the
// slot its pick holds) open until end is called.
func eppHold(t *testing.T, ctx context.Context, cc *grpc.ClientConn, kv ...string) (extprocclient.Pick, func()) {
	t.Helper()
	x := eppStart(t, ctx, cc, kv...)
	pk, err := x.Pick()
	if err != nil {
		t.Fatal(err)
	}
	if pk.Status != 0 {
		t.Fatalf("held stream refused: %d %s", pk.Status, pk.Reason)
	}
	return pk, func() { eppEnd(t, x, pk) }
}

// eppEnd reports the response as served by the primary and ends the stream.
func eppEnd(t *testing.T, x *extprocclient.Exchange, pk extprocclient.Pick) {
	t.Helper()
	if err := x.Respond(http.StatusOK, pk.Endpoints[0]); err != nil {
		t.Error(err)
	}
	if err := x.Finish(); err != nil {
		t.Error(err)
	}
}

// windowsIdle: no window slot is held and nobody is queued.
func windowsIdle(rt *Runtime, r *spec.Rule) bool {
	if rt.queueLen(r) != 0 {
		return false
	}
	c := rt.rules[r.Key].cur.Load()
	for _, w := range c.win {
		if w.InFlight() != 0 {
			return false
		}
	}
	return true
}

// TestEPPWindowSheds: on a rule whose every endpoint is at its window, a
// pick the queue cannot hold (no queue, its wait bound, its x-slo-ttft-ms
// deadline) is the EPP's 429 with the queue's reason in the reason header
// and a Retry-After, charging no endpoint.
func TestEPPWindowSheds(t *testing.T) {
	tests := []struct {
		name    string
		length  int
		maxWait time.Duration
		hdr     []string
		reason  string
	}{
		{"no queue", 0, 0, nil, flow.ReasonQueueFull},
		{"wait bound", 8, 300 * time.Millisecond, nil, flow.ReasonTimeout},
		{"ttft deadline", 8, 20 * time.Second, []string{epp.HeaderSLOTTFT, "300"}, flow.ReasonDeadline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.Flow.QueueLength, o.Flow.MaxWait = tc.length, tc.maxWait
			rt, r, m, cc := eppFlowRule(t, o, 1, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, end1 := eppHold(t, ctx, cc)
			_, end2 := eppHold(t, ctx, cc)

			x := eppStart(t, ctx, cc, append([]string{epp.HeaderFairnessID, "tenant-a"}, tc.hdr...)...)
			pk, err := x.Pick()
			if err != nil {
				t.Fatal(err)
			}
			if pk.Status != http.StatusTooManyRequests || pk.Reason != tc.reason || pk.Headers[epp.DefaultRefusalReasonHeader] != tc.reason {
				t.Fatalf("pick on a full pool: %+v; want 429 with %q in the body and %s", pk, tc.reason, epp.DefaultRefusalReasonHeader)
			}
			if s, err := strconv.Atoi(pk.Headers["retry-after"]); err != nil || s < 1 {
				t.Errorf("retry-after %q, want whole seconds ≥ 1", pk.Headers["retry-after"])
			}
			c := rt.rules[r.Key].cur.Load()
			var active int64
			for _, ep := range c.eps {
				active += ep.active.Load()
			}
			if active != 2 {
				t.Errorf("in flight after the shed: %d, want the 2 held picks only", active)
			}
			if v := metricValue(t, m.Flow.Shed.WithLabelValues(r.Name, "standard", tc.reason)); v != 1 {
				t.Errorf("infergate_flow_shed_total{reason=%q} = %v, want 1", tc.reason, v)
			}
			end1()
			end2()
			waitFor(t, 5*time.Second, "the windows to empty", func() bool { return windowsIdle(rt, r) })
			assertSettled(t, c)
		})
	}
}

// TestEPPWindowReleases: every way an ext_proc stream ends gives its
// window slot back — a served response, a client gone after the pick, a
// stream abandoned while queued — so a window of one per endpoint serves
// any number of streams and ends empty.
func TestEPPWindowReleases(t *testing.T) {
	o := testOptions()
	o.Flow.MaxWait = 10 * time.Second
	rt, r, m, cc := eppFlowRule(t, o, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const streams, workers = 60, 6 // three times the windows' room at once
	// Both windows held until a worker's stream queues: the queue is then
	// used whatever the scheduler does (six workers alone once finished
	// each stream before the next began, and nothing queued).
	_, holdA := eppHold(t, ctx, cc)
	_, holdB := eppHold(t, ctx, cc)
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for w := range workers {
		wg.Go(func() {
			for k := w; k < streams; k += workers {
				sctx, scancel := context.WithCancel(ctx)
				x, err := extprocclient.Start(sctx, cc, extprocclient.Request{Headers: extprocclient.Headers(
					":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw"), Body: []byte(`{"model":"m"}`)})
				var pk extprocclient.Pick
				if err == nil {
					pk, err = x.Pick()
				}
				switch {
				case err != nil:
					errs <- fmt.Errorf("stream %d: %w", k, err)
				case pk.Status != 0:
					errs <- fmt.Errorf("stream %d: refused %d %s", k, pk.Status, pk.Reason)
				case k%3 == 0: // the client leaves mid-response
					if err := x.ResponseHeaders(http.StatusOK, pk.Endpoints[0], true); err != nil {
						errs <- err
					}
					x.Close()
				default:
					if err := x.Respond(http.StatusOK, pk.Endpoints[0]); err != nil {
						errs <- err
					} else if err := x.Finish(); err != nil {
						errs <- err
					}
				}
				scancel()
			}
		})
	}
	waitFor(t, 5*time.Second, "a stream to queue behind the held windows", func() bool { return rt.queueLen(r) > 0 })
	holdA()
	holdB()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitFor(t, 5*time.Second, "the windows to empty", func() bool { return windowsIdle(rt, r) })
	if q := metricValue(t, m.Flow.Requests.WithLabelValues(r.Name, "standard", flowQueued)); q == 0 {
		t.Error("no stream queued: the test did not saturate the windows")
	}

	// A stream abandoned while queued leaves the queue and holds nothing.
	_, end1 := eppHold(t, ctx, cc)
	_, end2 := eppHold(t, ctx, cc)
	qctx, qcancel := context.WithCancel(ctx)
	x := eppStart(t, qctx, cc)
	waitFor(t, 5*time.Second, "the stream to queue", func() bool { return rt.queueLen(r) == 1 })
	x.Close()
	qcancel()
	waitFor(t, 5*time.Second, "the abandoned stream to leave the queue", func() bool { return rt.queueLen(r) == 0 })
	waitFor(t, 5*time.Second, "client_gone counted", func() bool {
		return metricValue(t, m.Flow.Requests.WithLabelValues(r.Name, "standard", flowClientGone)) == 1
	})
	end1()
	end2()
	waitFor(t, 5*time.Second, "the windows to empty", func() bool { return windowsIdle(rt, r) })
	assertSettled(t, rt.rules[r.Key].cur.Load())
	_, end := eppHold(t, ctx, cc) // the pool still picks
	end()
}

// TestEPPPriorityDispatch: picks queued behind a full window leave in
// class order whatever their arrival: a critical objective before a
// sheddable one that waited longer, and x-request-priority over the
// objective header, as for proxied requests.
func TestEPPPriorityDispatch(t *testing.T) {
	o := testOptions()
	o.Flow.MaxWait = 20 * time.Second
	o.Flow.MinShare = 0
	rt, r, _, cc := eppFlowRule(t, o, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, endHold := eppHold(t, ctx, cc)

	type picked struct {
		name string
		x    *extprocclient.Exchange
		pk   extprocclient.Pick
		err  error
	}
	order := make(chan picked, 3)
	submit := func(name string, kv ...string) {
		before := rt.queueLen(r)
		x := eppStart(t, ctx, cc, kv...)
		go func() {
			pk, err := x.Pick()
			order <- picked{name, x, pk, err}
		}()
		waitFor(t, 5*time.Second, name+" queued", func() bool { return rt.queueLen(r) == before+1 })
	}
	submit("sheddable", epp.HeaderObjective, "sheddable")
	submit("low-by-priority", "x-request-priority", "low", epp.HeaderObjective, "critical")
	submit("critical", epp.HeaderObjective, "critical")

	endHold()
	var got []string
	for range 3 {
		p := <-order
		if p.err != nil || p.pk.Status != 0 {
			t.Fatalf("%s: %+v, %v", p.name, p.pk, p.err)
		}
		got = append(got, p.name)
		select {
		case early := <-order: // the window is one: nobody else may pick until this ends
			t.Fatalf("%s picked while %s held the only slot", early.name, p.name)
		case <-time.After(50 * time.Millisecond):
		}
		eppEnd(t, p.x, p.pk)
	}
	if want := []string{"critical", "sheddable", "low-by-priority"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dispatch order %v, want %v", got, want)
	}
	waitFor(t, 5*time.Second, "the windows to empty", func() bool { return windowsIdle(rt, r) })
}

// TestEPPPDDecodeWindow: on a P/D rule an EPP pick holds its decode's
// window slot (the prefill, without a window of its own, is unbounded), a
// pick that finds every decode full is shed with 429, and a settled pick
// frees its decode for the next.
func TestEPPPDDecodeWindow(t *testing.T) {
	o := pdTestOptions()
	o.Flow.QueueLength = 0 // shed at once: the test reads refusals, not waits
	f := newPDFleet(t, o, spec.EngineVLLM, 1, 2, func(r *spec.Rule) { r.AdmissionWindow = 1 })
	p := f.rt.EPPPicker(f.rule.Name)
	decodes := addrs(f.rule, spec.RoleDecode)
	ctx := context.Background()
	var held []epp.Result
	for k := range 2 {
		res, err := p.Pick(ctx, chatReq(fmt.Sprintf("conv-%d", k), fmt.Sprintf("prompt %d", k), nil))
		if err != nil {
			t.Fatalf("pick %d: %v", k, err)
		}
		held = append(held, res)
	}
	if held[0].Endpoints[0] == held[1].Endpoints[0] || !contains(decodes, held[0].Endpoints[0]) || !contains(decodes, held[1].Endpoints[0]) {
		t.Fatalf("destinations %s and %s: want both decodes, one each", held[0].Endpoints[0], held[1].Endpoints[0])
	}
	_, err := p.Pick(ctx, chatReq("conv-2", "prompt 2", nil))
	var ref *epp.Refusal
	if !errors.As(err, &ref) || ref.Status != http.StatusTooManyRequests || ref.Reason != flow.ReasonQueueFull || ref.RetryAfter < time.Second {
		t.Fatalf("pick with both decodes at their window: %v; want 429 %s with a Retry-After", err, flow.ReasonQueueFull)
	}
	p.Served(epp.Outcome{Result: held[0], Endpoint: held[0].Endpoints[0], Status: http.StatusOK, Complete: true})
	res, err := p.Pick(ctx, chatReq("conv-3", "prompt 3", nil))
	if err != nil {
		t.Fatalf("pick after a decode freed: %v", err)
	}
	if res.Endpoints[0] != held[0].Endpoints[0] {
		t.Errorf("destination %s, want the freed decode %s", res.Endpoints[0], held[0].Endpoints[0])
	}
	p.Served(epp.Outcome{Result: res, Status: http.StatusOK})
	p.Served(epp.Outcome{Result: held[1], Status: http.StatusOK})
	c := f.rt.rules[f.rule.Key].cur.Load()
	for i, w := range c.win {
		if w.InFlight() != 0 {
			t.Errorf("endpoint %d holds %d window slots after every pick settled", i, w.InFlight())
		}
	}
	assertSettled(t, c)
}

// TestEPPConformanceWindowed runs the black-box EPP suite against a CHWBL
// rule with admission windows (two per endpoint, so the pool holds eight
// picks at once): every protocol check holds under flow control, the
// suite's saturation test sees the ninth pick shed with 429 and a reason
// after its wait, and ended streams give their slots back round after round.
func TestEPPConformanceWindowed(t *testing.T) {
	const endpoints, window = 4, 2
	o := testOptions()
	o.Flow.MaxWait = 2 * time.Second // the saturation test's extra pick waits this long, then is shed
	rt, _ := newTestRuntime(t, o)
	eps := fakeEndpoints(t, "c", endpoints)
	r := newRule("127.0.0.1", freePort(t), spec.SelCHWBL, eps...)
	r.Name = "epp-windowed"
	r.CHWBL = &spec.CHWBL{PrefixHashLevel: 1, MeanLoadFactor: 175, Replication: 100}
	r.AdmissionWindow = window
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	p := &recordingPicker{EPPPicker: rt.EPPPicker(r.Name)}
	_, addr, haddr := serveEPP(t, p, true)
	eppconformance.Run(t, eppconformance.Target{
		Addr:                addr,
		HealthAddr:          haddr,
		Pool:                addrs(r, spec.RoleAny),
		Capacity:            endpoints * window,
		RefusalReasonHeader: epp.DefaultRefusalReasonHeader,
		Affinity:            true,
		Served:              p.list,
		Goroutines:          func() (int, error) { return runtime.NumGoroutine(), nil },
		Streams:             200, // through eight slots: most of them wait in the queue
	})
	waitFor(t, 5*time.Second, "the windows to empty", func() bool { return windowsIdle(rt, r) })
	assertSettled(t, rt.rules[r.Key].cur.Load())
}
