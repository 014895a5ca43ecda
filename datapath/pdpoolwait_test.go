package datapath

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
)

// TestPDPoolWaitAnswers504WithoutFeedingBreaker: a P/D prefill whose one
// allowed engine connection is busy waits for it no longer than the
// prefill timeout and answers 504 upstream_pool_timeout, the single pool's
// code; nothing reaches the engine and the breaker, which opens on one P/D
// timeout here, stays closed, so the request after the connection is back
// is served.
func TestPDPoolWaitAnswers504WithoutFeedingBreaker(t *testing.T) {
	if pd.CodePoolTimeout != CodeUpstreamPoolTimeout {
		t.Fatalf("P/D pool timeout code %q, single pool %q: one bound, one code", pd.CodePoolTimeout, CodeUpstreamPoolTimeout)
	}
	const bound = 400 * time.Millisecond
	o := pdTestOptions()
	o.PrefillTimeout = bound
	o.Upstream.MaxConnsPerEndpoint = 1
	o.BreakerPD5xxStreak = 1
	o.BreakerOpenFor = time.Minute
	f := newPDFleet(t, o, spec.EngineVLLM, 1, 1)
	prefill := f.prefills[0].Endpoint()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held, err := f.rt.up.Send(ctx, upstream.Leg{Endpoint: prefill, Method: http.MethodGet, Path: "/v1/models"})
	if err != nil {
		t.Fatalf("holding the prefill's connection: %v", err)
	}
	start := time.Now()
	res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, ""))
	if took := time.Since(start); took > bound+bound/2 {
		t.Fatalf("answered after %v, want within the prefill timeout %v", took, bound)
	}
	if res.status != http.StatusGatewayTimeout || errorCode(t, res.body) != CodeUpstreamPoolTimeout {
		t.Fatalf("with the prefill's connection busy: %d %s, want 504 %s", res.status, res.body, CodeUpstreamPoolTimeout)
	}
	if n := len(f.prefills[0].Records()); n != 0 {
		t.Fatalf("the prefill at its cap received %d requests, want none", n)
	}
	if st, _ := f.rt.Status(f.rule.Key); st.Endpoints[prefill.ID].Breaker != "closed" {
		t.Fatalf("prefill breaker %s after a pool wait, want closed (nothing was sent)", st.Endpoints[prefill.ID].Breaker)
	}
	held.Body.Close()
	cancel()
	if res := post(t, testClient(), f.url(pathCompletions), pdBody(pathCompletions, false, "")); res.status != http.StatusOK {
		t.Fatalf("once the connection is free: %d %s, want 200", res.status, res.body)
	}
}
