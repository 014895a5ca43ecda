package pd_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// TestMoRIIOConcurrentPrefillVerdicts: a concurrent WRITE prefill's
// failure is judged as a sequential prefill's is. An engine's 4xx whose
// body is over the size cap is still relayed with its status (the
// engine refused the client's request; it is no handoff fault), and the
// decode is dropped.
func TestMoRIIOConcurrentPrefillVerdicts(t *testing.T) {
	opts := testOptions()
	opts.MaxPrefillResponse = 1 << 10
	d, ok := pd.New(spec.EngineVLLM, opts)
	if !ok {
		t.Fatal("no vLLM dialect")
	}
	f, dec := writeFleet(t, pdfake.NewMoRIIOFabric())
	// The refusal waits for the decode leg to arrive: answered first, the
	// prefill's 400 could drop the decode before it reached the engine.
	p := oversizedRefusal(t, 4<<10, func(r *http.Request) { _ = f.dec.WaitReceived(r.Context(), 1) })
	res := f.do(t, d, pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: p, Decode: dec}, 0)
	if res.status != http.StatusBadRequest || res.out.HandoffInvalid || !res.out.Relayed || res.out.FailedPhase != pd.PhasePrefill {
		t.Fatalf("client got %d %q (outcome %+v), want the prefill's 400 relayed", res.status, res.header.Get("X-Infergate-Error"), res.out)
	}
	if r := waitLegs(t, f.dec, 1)[0]; !r.Cancelled {
		t.Errorf("the decode waiting for its push was not dropped: %+v", r)
	}
}

// TestMoRIIOConcurrentDecodeTimeout: a concurrent WRITE decode's
// first-byte bound (DecodeTimeout) starts when the prefill's handoff has
// passed, not at its dispatch: a prefill longer than the bound still
// serves, and a decode silent for the bound after the prefill answered
// is 504 pd_decode_timeout.
func TestMoRIIOConcurrentDecodeTimeout(t *testing.T) {
	opts := testOptions()
	opts.DecodeTimeout = 300 * time.Millisecond
	d, ok := pd.New(spec.EngineVLLM, opts)
	if !ok {
		t.Fatal("no vLLM dialect")
	}
	t.Run("prefill longer than the decode bound", func(t *testing.T) {
		fab := pdfake.NewMoRIIOFabric()
		fab.PrefillDelay = 900 * time.Millisecond
		f, dec := writeFleet(t, fab)
		res := f.do(t, d, pathChat, clientBody(pathChat, true), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dec}, 0)
		if res.status != 200 || !strings.Contains(res.body, "data: [DONE]") || res.out.Code != "" {
			t.Fatalf("client got %d %q (outcome %+v): %s", res.status, res.out.Code, res.out, res.body)
		}
		noViolations(t, f.prefill, f.dec)
	})
	t.Run("decode silent after the prefill", func(t *testing.T) {
		f, dec := writeFleet(t, pdfake.NewMoRIIOFabric())
		f.dec.Inject(pdfake.FaultHang, 1)
		start := time.Now()
		res := f.do(t, d, pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dec}, 0)
		if res.status != http.StatusGatewayTimeout || res.out.Code != pd.CodeDecodeTimeout {
			t.Fatalf("client got %d %q (outcome %+v): %s", res.status, res.out.Code, res.out, res.body)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("answered after %v: the decode bound never started", el)
		}
	})
}

// oversizedRefusal is a MoRI-IO WRITE prefill that refuses every request
// with a 400 whose body is n bytes, once before(r) has returned.
func oversizedRefusal(t *testing.T, n int, before func(*http.Request)) spec.Endpoint {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		before(r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"object":"error","message":"` + strings.Repeat("x", n) + `","code":400}`))
	}))
	t.Cleanup(srv.Close)
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	return spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1, Role: spec.RolePrefill,
		PairFacts: map[string]string{spec.FactKVConnector: pdfake.ConnectorMoRIIO},
		Labels:    map[string]string{"moriio_mode": "write", "moriio_host": "127.0.0.8"}}
}
