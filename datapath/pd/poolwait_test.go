package pd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// holdConn takes the one connection a capped sender may open to ep: a side
// request whose body is never read keeps it busy until the test ends.
func holdConn(t *testing.T, s *upstream.Client, ep spec.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := s.Send(ctx, upstream.Leg{Endpoint: ep, Method: http.MethodGet, Path: "/v1/models"})
	if err != nil {
		cancel()
		t.Fatalf("holding a connection to %s: %v", ep.ID, err)
	}
	t.Cleanup(func() { resp.Body.Close(); cancel() })
	if n := s.OpenConns(ep.ID); n != 1 {
		t.Fatalf("%d connections open to %s, want the held one", n, ep.ID)
	}
}

// TestLegAtConnectionCapAnswersPoolTimeout: a leg whose endpoint has every
// allowed connection busy waits no longer than its phase bound, is never
// sent, and the client gets 504 upstream_pool_timeout, as a single-pool
// request does. Neither leg is reported as a timeout or a death, so the
// breakers are not fed.
func TestLegAtConnectionCapAnswersPoolTimeout(t *testing.T) {
	cases := []struct {
		name   string
		engine spec.Engine
		full   pd.Phase // the leg whose endpoint is at its cap
	}{
		{"vllm prefill", spec.EngineVLLM, pd.PhasePrefill},
		{"vllm decode", spec.EngineVLLM, pd.PhaseDecode},
		{"sglang prefill", spec.EngineSGLang, pd.PhasePrefill},
		{"sglang decode", spec.EngineSGLang, pd.PhaseDecode},
		{"trtllm context", spec.EngineTRTLLM, pd.PhasePrefill},
		{"trtllm generation", spec.EngineTRTLLM, pd.PhaseDecode},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleet(t, tc.engine)
			opts := shortOptions()
			d, ok := pd.New(tc.engine, opts)
			if !ok {
				t.Fatalf("no dialect for %s", tc.engine)
			}
			sender := upstream.NewWithOptions(time.Second, 64, upstream.Options{MaxConnsPerEndpoint: 1}, nil)
			t.Cleanup(sender.CloseIdle)
			full := map[pd.Phase]*pdfake.Engine{pd.PhasePrefill: f.prefill, pd.PhaseDecode: f.dec}[tc.full]
			holdConn(t, sender, full.Endpoint())
			bound := opts.PrefillTimeout
			if tc.full == pd.PhaseDecode && tc.engine != spec.EngineSGLang {
				bound = opts.DecodeTimeout // SGLang's legs share the prefill window
			}

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			body := clientBody(pathCompletions, false)
			req := &pd.Request{Path: pathCompletions, Header: http.Header{}, Body: []byte(body), RequestID: "0123456789abcdef0123456789abcdef", Rule: f.rule}
			rec := httptest.NewRecorder()
			start := time.Now()
			out := d.Serve(ctx, rec, req, pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, sender)
			took := time.Since(start)

			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != http.StatusGatewayTimeout || e.Error.Code != pd.CodePoolTimeout {
				t.Fatalf("client got %d %q, want 504 %s", rec.Code, rec.Body.String(), pd.CodePoolTimeout)
			}
			if out.Code != pd.CodePoolTimeout || out.FailedPhase != tc.full {
				t.Fatalf("outcome code %q phase %q, want %q %q", out.Code, out.FailedPhase, pd.CodePoolTimeout, tc.full)
			}
			if took > bound+bound/2 {
				t.Fatalf("answered after %v, want within the %s bound %v", took, tc.full, bound)
			}
			waited := 0
			for _, l := range out.Legs {
				if l.TimedOut || l.Died || l.NotSent {
					t.Errorf("%s leg on %s: timed out %v, died %v, not sent %v; want none (the breaker must not be fed)", l.Phase, l.Endpoint.ID, l.TimedOut, l.Died, l.NotSent)
				}
				if l.PoolWait {
					waited++
					if l.Phase != tc.full || l.Endpoint.ID != full.Endpoint().ID {
						t.Errorf("pool wait reported on the %s leg to %s, want the %s leg to %s", l.Phase, l.Endpoint.ID, tc.full, full.Endpoint().ID)
					}
				}
			}
			if waited != 1 {
				t.Fatalf("%d legs report a pool wait, want 1: %+v", waited, out.Legs)
			}
			if tc.full == pd.PhaseDecode && out.DecodeTTFB != 0 {
				t.Errorf("decode TTFB %v recorded for a decode that was never sent", out.DecodeTTFB)
			}
			if recs := full.Records(); len(recs) != 0 {
				t.Fatalf("the endpoint at its cap received %d generation requests, want none", len(recs))
			}
		})
	}
}
