package datapath

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// TestMooncakeEngineIDRecheckedAfterFailure: a Mooncake prefill restarts
// with a new engine id. Requests that succeed keep naming the learned id
// (the periodic read is 10 s away), but the first failed handoff through
// the prefill — its leg or the decode's answering 5xx — has the id read
// again before the next request, which names the new one.
func TestMooncakeEngineIDRecheckedAfterFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		leg  pdfake.Role
	}{{"prefill leg fails", pdfake.Prefill}, {"decode leg fails", pdfake.Decode}} {
		t.Run(tc.name, func(t *testing.T) {
			// First: its goroutine check runs after the servers below close.
			rt := newPDTestRuntime(t)
			pre, dec := startMooncakeFake(t, "127.0.0.20:0", pdfake.Prefill, 0), startMooncakeFake(t, "127.0.0.30:0", pdfake.Decode, 0)
			// The prefill's bootstrap server, whose id the test changes as a
			// restart would; the fake decode checks the id it is given here.
			var engineID atomic.Value
			engineID.Store("engine-before-restart")
			var queries atomic.Int32
			ln, err := net.Listen("tcp", "127.0.0.20:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				queries.Add(1)
				_, _ = fmt.Fprintf(w, `{"0":{"engine_id":%q}}`, engineID.Load())
			})}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })

			pe := pre.Endpoint()
			pe.Labels = nil // learned, not configured
			pe.BootstrapPort = uint16(ln.Addr().(*net.TCPAddr).Port)
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pe, dec.Endpoint())
			r.Name, r.Engine, r.PD = "pd-mooncake", spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			body := `{"model":"fake-model","prompt":"hello there","max_tokens":3}`
			send := func() { _ = post(t, testClient(), ruleURL(r)+pathCompletions, body) }
			namedBy := func(rec pdfake.Record) string {
				var b struct {
					KV struct {
						RemoteEngineID string `json:"remote_engine_id"`
					} `json:"kv_transfer_params"`
				}
				_ = json.Unmarshal(rec.Body, &b)
				return b.KV.RemoteEngineID
			}
			named := func() string { // the engine id the last decode leg named
				t.Helper()
				recs := dec.Records()
				if len(recs) == 0 {
					t.Fatal("no decode leg to read")
				}
				return namedBy(recs[len(recs)-1])
			}
			reads := func() int { // the gateway's: the fake decode asks once per leg naming an id
				n := int(queries.Load())
				for _, rec := range dec.Records() {
					if namedBy(rec) != "" && rec.Fault == pdfake.FaultNone { // a faulted leg asks nothing
						n--
					}
				}
				return n
			}
			for deadline := time.Now().Add(5 * time.Second); len(pre.Records()) == 0; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the engine id was never learned")
				}
				send()
			}
			if got := named(); got != "engine-before-restart" {
				t.Fatalf("decode named %q before the restart", got)
			}

			engineID.Store("engine-after-restart")
			before := reads()
			send()
			if got := named(); got != "engine-before-restart" || reads() != before {
				t.Fatalf("without a failure: decode named %q after %d re-reads; want the learned id, none", got, reads()-before)
			}
			map[pdfake.Role]*pdfake.Engine{pdfake.Prefill: pre, pdfake.Decode: dec}[tc.leg].Inject(pdfake.Fault500, 1)
			send()
			// The failure is noted when the handler returns, which can be
			// just after this client has read its answer.
			c := rt.rules[r.Key].cur.Load()
			waitFor(t, 5*time.Second, "the failed handoff to be noted", func() bool { return c.eps[0].kvIDCheck.due.Load() })
			send()
			if got := named(); got != "engine-after-restart" {
				t.Fatalf("after a failed handoff the next request named %q, want the restarted engine's id", got)
			}
			if n := reads() - before; n != 1 {
				t.Errorf("%d re-reads after one failure, want 1", n)
			}
		})
	}
}

func TestHandoffFailed(t *testing.T) {
	leg := func(p pd.Phase, status int, err error, mod ...func(*pd.LegResult)) pd.LegResult {
		l := pd.LegResult{Phase: p, Status: status, Err: err}
		for _, m := range mod {
			m(&l)
		}
		return l
	}
	cancelled := func(l *pd.LegResult) { l.Cancelled = true }
	timedOut := func(l *pd.LegResult) { l.Cancelled, l.TimedOut = true, true }
	poolWait := func(l *pd.LegResult) { l.PoolWait = true }
	boom := errors.New("connection refused")
	for _, tc := range []struct {
		name string
		o    pd.Outcome
		want bool
	}{
		{"both legs 200", pd.Outcome{Legs: []pd.LegResult{leg(pd.PhasePrefill, 200, nil), leg(pd.PhaseDecode, 200, nil)}}, false},
		{"client error from the decode", pd.Outcome{Legs: []pd.LegResult{leg(pd.PhasePrefill, 200, nil), leg(pd.PhaseDecode, 400, nil)}}, false},
		{"prefill 503", pd.Outcome{Legs: []pd.LegResult{leg(pd.PhasePrefill, 503, nil), leg(pd.PhaseDecode, 200, nil)}}, true},
		{"prefill refused", pd.Outcome{Legs: []pd.LegResult{leg(pd.PhasePrefill, 0, boom)}}, true},
		{"decode 500", pd.Outcome{Legs: []pd.LegResult{leg(pd.PhasePrefill, 200, nil), leg(pd.PhaseDecode, 500, nil)}}, true},
		{"decode timed out", pd.Outcome{Legs: []pd.LegResult{leg(pd.PhaseDecode, 0, boom, timedOut)}}, true},
		{"cancelled by infergate", pd.Outcome{Legs: []pd.LegResult{leg(pd.PhasePrefill, 0, boom, cancelled)}}, false},
		{"never left the pool queue", pd.Outcome{Legs: []pd.LegResult{leg(pd.PhasePrefill, 0, boom, poolWait)}}, false},
		{"transfer lost", pd.Outcome{KVTransferFailed: true}, true},
	} {
		if got := handoffFailed(&tc.o); got != tc.want {
			t.Errorf("%s: handoffFailed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMooncakeDPRanksLearned: the engines of a data-parallel Mooncake
// prefill are read from its bootstrap /query with its engine id, and every
// request is pinned to one rank whose engine the decode names: the fake
// decode's pull asks that engine's worker and finds the transfer (without
// the ranks the prefill's own balancer spreads the legs and the decode,
// naming rank 0, misses most).
func TestMooncakeDPRanksLearned(t *testing.T) {
	pre, dec := startMooncakeFake(t, "127.0.0.21:0", pdfake.Prefill, 4), startMooncakeFake(t, "127.0.0.31:0", pdfake.Decode, 4)
	pe := pre.Endpoint()
	pe.Labels = nil
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pe, dec.Endpoint())
	r.Name, r.Engine, r.PD = "pd-mooncake-dp", spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
	rt := newPDTestRuntime(t)
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"fake-model","prompt":"hello there","max_tokens":3}`
	deadline := time.Now().Add(5 * time.Second)
	for len(pre.Records()) == 0 { // until the engines are read
		if time.Now().After(deadline) {
			t.Fatal("no request reached the prefill: its engines were never read")
		}
		if res := post(t, testClient(), ruleURL(r)+pathCompletions, body); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 8 {
		if res := post(t, testClient(), ruleURL(r)+pathCompletions, body); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
	}
	recs := pre.Records()
	if len(recs) < 8 {
		t.Fatalf("prefill got %d legs", len(recs))
	}
	for _, rec := range recs {
		if rec.Header.Get("X-data-parallel-rank") == "" {
			t.Errorf("prefill leg not pinned to a rank: %s", rec.Body)
		}
	}
	for _, e := range []*pdfake.Engine{pre, dec} {
		for _, rec := range e.Records() {
			if rec.Violation != "" {
				t.Errorf("violation %q", rec.Violation)
			}
		}
	}
}

// TestMooncakeEngineIDLearned: a vLLM Mooncake prefill without a
// kv_engine_id label has its engine id read from its bootstrap server's
// /query; once read, requests run both legs and the decode names the id
// (before, the decode ran alone: mooncake_engine_id_unknown).
func TestMooncakeEngineIDLearned(t *testing.T) {
	pre, dec := startMooncakeFake(t, "127.0.0.20:0", pdfake.Prefill, 0), startMooncakeFake(t, "127.0.0.30:0", pdfake.Decode, 0)
	pe := pre.Endpoint()
	wantID := pe.Labels["kv_engine_id"]
	pe.Labels = nil // the operator did not configure it
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pe, dec.Endpoint())
	r.Name, r.Engine, r.PD = "pd-mooncake", spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
	rt := newPDTestRuntime(t)
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"fake-model","prompt":"hello there","max_tokens":3}`
	deadline := time.Now().Add(5 * time.Second)
	for len(pre.Records()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no request reached the prefill: the engine id was never learned")
		}
		if res := post(t, testClient(), ruleURL(r)+pathCompletions, body); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	recs := dec.Records()
	var b struct {
		KV struct {
			RemoteEngineID string `json:"remote_engine_id"`
		} `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(recs[len(recs)-1].Body, &b); err != nil {
		t.Fatal(err)
	}
	if b.KV.RemoteEngineID != wantID {
		t.Errorf("decode leg names engine %q, want the prefill's %q", b.KV.RemoteEngineID, wantID)
	}
	for _, e := range []*pdfake.Engine{pre, dec} {
		for _, rec := range e.Records() {
			if rec.Violation != "" {
				t.Errorf("violation %q", rec.Violation)
			}
		}
	}
}

// startMooncakeFake starts a vLLM Mooncake fake engine (dpSize > 1: that
// many data-parallel ranks), closed when the test ends.
func startMooncakeFake(t *testing.T, addr string, role pdfake.Role, dpSize int) *pdfake.Engine {
	t.Helper()
	cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
	cfg.Addr, cfg.Connector, cfg.DPSize = addr, pdfake.ConnectorMooncake, dpSize
	e, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// newPDTestRuntime is a runtime with the P/D test options, closed when the
// test ends and checked to leave no goroutine behind (cleanups run
// last-first: made before the engines, its check runs after they closed).
func newPDTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	rt := NewWithMetrics(pdTestOptions(), metrics.New(), nil)
	closeAtEnd(t, rt)
	return rt
}
