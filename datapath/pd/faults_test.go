package pd_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/clienterr"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// faultCase is what the client must see when one leg of one engine fails.
type faultCase struct {
	engine spec.Engine
	leg    pd.Phase
	fault  pdfake.Fault
	// status/code: client status and X-Infergate-Error ("" for relayed or
	// successful answers).
	status int
	code   string
	// decodeLegs / prefillLegs: requests each engine must have received;
	// anyLegs when the gateway may cancel a concurrent leg before it is sent.
	decodeLegs  int
	prefillLegs int
	// cancelled: the engines that must have seen the gateway close the leg.
	prefillCancelled, decodeCancelled bool
	// check asserts anything else about the result.
	check func(t *testing.T, r result, f *fleet)
}

func recompute(engine spec.Engine) func(t *testing.T, r result, f *fleet) {
	field := "kv_transfer_params"
	if engine == spec.EngineTRTLLM {
		field = "disaggregated_params"
	}
	return func(t *testing.T, r result, f *fleet) {
		if !r.out.KVTransferFailed {
			t.Error("Outcome.KVTransferFailed = false, want true (decode recomputed)")
		}
		d := f.dec.Records()[0]
		if strings.Contains(string(d.Body), field) {
			t.Errorf("decode got %s after a failed prefill: %s", field, d.Body)
		}
		if !r.out.Legs[0].Died {
			t.Errorf("prefill leg not marked Died: %+v", r.out.Legs[0])
		}
	}
}

func prefill500Recompute(t *testing.T, r result, f *fleet) {
	if !r.out.KVTransferFailed || r.out.Legs[0].Status != 500 {
		t.Errorf("outcome = %+v, want KV transfer failure after prefill 500", r.out)
	}
}

// streamCut: the decode died after its first bytes. A streaming client gets
// an error event and no [DONE]; a non-streaming client a short body (the
// engine's Content-Length is not met, so its connection is closed).
func streamCut(t *testing.T, r result, _ *fleet) {
	if !r.out.StreamCut {
		t.Errorf("Outcome.StreamCut = false; legs %+v", r.out.Legs)
	}
	if r.stream {
		if !strings.HasSuffix(r.body, `"code":"`+pd.CodeDecodeDied+`"}}`+"\n\n") || strings.Contains(r.body, "[DONE]") {
			t.Errorf("cut stream does not end with an error event: %q", r.body)
		}
	} else if r.readErr == nil {
		t.Errorf("client read a cut body without error: %q", r.body)
	}
}

// idleEnded: the decode went silent after its first bytes. A stream is
// closed with a synthesised [DONE]; a plain body is cut short.
func idleEnded(t *testing.T, r result, _ *fleet) {
	if !r.out.IdleTimeout {
		t.Errorf("Outcome.IdleTimeout = false; %+v", r.out)
	}
	if r.stream && !strings.HasSuffix(r.body, "data: [DONE]\n\n") {
		t.Errorf("silent stream not ended with [DONE]: %q", r.body)
	}
	if !r.stream && r.readErr == nil {
		t.Errorf("client read a cut body without error: %q", r.body)
	}
}

func roomRetry(t *testing.T, r result, f *fleet) {
	if !r.out.RoomRetry {
		t.Error("Outcome.RoomRetry = false")
	}
	p := f.prefill.Records()
	rooms := map[string]bool{}
	for _, rec := range p {
		var tr struct {
			Room json.Number `json:"bootstrap_room"`
		}
		_ = json.Unmarshal(rec.Body, &tr)
		rooms[tr.Room.String()] = true
	}
	if len(rooms) != 2 {
		t.Errorf("pair retry reused the room: %v", rooms)
	}
}

// anyLegs: zero or more requests, each of which must meet the cancelled
// expectation.
const anyLegs = -1

func faultCases() []faultCase {
	var cs []faultCase
	for _, e := range []spec.Engine{spec.EngineVLLM, spec.EngineTRTLLM} {
		cs = append(cs,
			faultCase{engine: e, leg: pd.PhasePrefill, fault: pdfake.Fault500, status: 200, prefillLegs: 1, decodeLegs: 1, check: prefill500Recompute},
			faultCase{engine: e, leg: pd.PhasePrefill, fault: pdfake.Fault400, status: 400, prefillLegs: 1, decodeLegs: 0,
				check: func(t *testing.T, r result, _ *fleet) {
					if !strings.Contains(r.body, "injected fault") || !r.out.Relayed {
						t.Errorf("prefill 400 not relayed verbatim: %s", r.body)
					}
				}},
			faultCase{engine: e, leg: pd.PhasePrefill, fault: pdfake.FaultDropBeforeFirstByte, status: 200, prefillLegs: 1, decodeLegs: 1, check: recompute(e)},
			faultCase{engine: e, leg: pd.PhasePrefill, fault: pdfake.FaultDropAfterFirstByte, status: 200, prefillLegs: 1, decodeLegs: 1, check: recompute(e)},
			faultCase{engine: e, leg: pd.PhasePrefill, fault: pdfake.FaultHang, status: 504, code: pd.CodePrefillTimeout, prefillLegs: 1, prefillCancelled: true},
			faultCase{engine: e, leg: pd.PhasePrefill, fault: pdfake.FaultStall, status: 504, code: pd.CodePrefillTimeout, prefillLegs: 1, prefillCancelled: true},
			faultCase{engine: e, leg: pd.PhaseDecode, fault: pdfake.Fault500, status: 500, prefillLegs: 1, decodeLegs: 1},
			faultCase{engine: e, leg: pd.PhaseDecode, fault: pdfake.Fault400, status: 400, prefillLegs: 1, decodeLegs: 1},
			faultCase{engine: e, leg: pd.PhaseDecode, fault: pdfake.FaultDropBeforeFirstByte, status: 502, code: pd.CodeDecodeDied, prefillLegs: 1, decodeLegs: 1},
			faultCase{engine: e, leg: pd.PhaseDecode, fault: pdfake.FaultDropAfterFirstByte, status: 200, prefillLegs: 1, decodeLegs: 1, check: streamCut},
			faultCase{engine: e, leg: pd.PhaseDecode, fault: pdfake.FaultHang, status: 504, code: pd.CodeDecodeTimeout, prefillLegs: 1, decodeLegs: 1, decodeCancelled: true},
			faultCase{engine: e, leg: pd.PhaseDecode, fault: pdfake.FaultStall, status: 200, prefillLegs: 1, decodeLegs: 1, decodeCancelled: true, check: idleEnded},
		)
	}
	sg := spec.EngineSGLang
	cs = append(cs,
		faultCase{engine: sg, leg: pd.PhasePrefill, fault: pdfake.Fault500, status: 502, code: pd.CodeSGPrefillFailed, prefillLegs: 1, decodeLegs: anyLegs, decodeCancelled: true},
		faultCase{engine: sg, leg: pd.PhasePrefill, fault: pdfake.Fault400, status: 400, prefillLegs: 1, decodeLegs: anyLegs, decodeCancelled: true,
			check: func(t *testing.T, r result, _ *fleet) {
				if !strings.Contains(r.body, "injected fault") {
					t.Errorf("prefill 400 not relayed: %s", r.body)
				}
			}},
		faultCase{engine: sg, leg: pd.PhasePrefill, fault: pdfake.FaultDropBeforeFirstByte, status: 200, prefillLegs: 2, decodeLegs: anyLegs, check: roomRetry},
		faultCase{engine: sg, leg: pd.PhasePrefill, fault: pdfake.FaultDropAfterFirstByte, status: 200, prefillLegs: 2, decodeLegs: anyLegs, check: roomRetry},
		faultCase{engine: sg, leg: pd.PhasePrefill, fault: pdfake.FaultHang, status: 504, code: pd.CodePrefillTimeout, prefillLegs: 1, decodeLegs: 1, prefillCancelled: true, decodeCancelled: true},
		faultCase{engine: sg, leg: pd.PhasePrefill, fault: pdfake.FaultStall, status: 504, code: pd.CodePrefillTimeout, prefillLegs: 1, decodeLegs: 1, prefillCancelled: true, decodeCancelled: true},
		faultCase{engine: sg, leg: pd.PhaseDecode, fault: pdfake.Fault500, status: 500, prefillLegs: anyLegs, decodeLegs: 1, prefillCancelled: true},
		faultCase{engine: sg, leg: pd.PhaseDecode, fault: pdfake.Fault400, status: 400, prefillLegs: anyLegs, decodeLegs: 1, prefillCancelled: true},
		faultCase{engine: sg, leg: pd.PhaseDecode, fault: pdfake.FaultDropBeforeFirstByte, status: 502, code: pd.CodeDecodeDied, prefillLegs: anyLegs, decodeLegs: 1, prefillCancelled: true},
		faultCase{engine: sg, leg: pd.PhaseDecode, fault: pdfake.FaultDropAfterFirstByte, status: 200, prefillLegs: anyLegs, decodeLegs: 1, prefillCancelled: true, check: streamCut},
		faultCase{engine: sg, leg: pd.PhaseDecode, fault: pdfake.FaultHang, status: 504, code: pd.CodePrefillTimeout, prefillLegs: 1, decodeLegs: 1, prefillCancelled: true, decodeCancelled: true},
		faultCase{engine: sg, leg: pd.PhaseDecode, fault: pdfake.FaultStall, status: 200, prefillLegs: anyLegs, decodeLegs: 1, prefillCancelled: true, decodeCancelled: true, check: idleEnded},
	)
	return cs
}

// TestLegFaults injects every fault into every leg of every engine and
// asserts the client's answer, which legs ran, that the gateway closed the
// legs it abandoned, and (via the harness deadline) that nothing hangs.
func TestLegFaults(t *testing.T) {
	for _, tc := range faultCases() {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/%s/%s/stream=%v", tc.engine, tc.leg, tc.fault, stream), func(t *testing.T) {
				f := startFleet(t, tc.engine)
				target := f.prefill
				if tc.leg == pd.PhaseDecode {
					target = f.dec
				}
				target.Inject(tc.fault, 1)
				opts := testOptions()
				if tc.fault == pdfake.FaultHang || tc.fault == pdfake.FaultStall {
					opts = shortOptions()
				}
				d, _ := pd.New(tc.engine, opts)
				pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}
				res := f.do(t, d, pathCompletions, clientBody(pathCompletions, stream), pair, 0)
				if res.status != tc.status {
					t.Errorf("client status = %d, want %d; body %s", res.status, tc.status, res.body)
				}
				if got := res.header.Get(clienterr.Header); got != tc.code {
					t.Errorf("%s = %q, want %q", clienterr.Header, got, tc.code)
				}
				if tc.code != "" {
					var eb struct {
						Error struct{ Message, Type, Code string } `json:"error"`
					}
					if err := json.Unmarshal([]byte(res.body), &eb); err != nil || eb.Error.Code != tc.code || eb.Error.Message == "" || eb.Error.Type == "" {
						t.Errorf("error body not OpenAI-shaped with code %s: %s", tc.code, res.body)
					}
					if res.out.Code != tc.code || res.out.Status != tc.status {
						t.Errorf("outcome = %d %q, want %d %q", res.out.Status, res.out.Code, tc.status, tc.code)
					}
				}
				pr := waitLegs(t, f.prefill, tc.prefillLegs)
				dr := waitLegs(t, f.dec, tc.decodeLegs)
				if tc.prefillCancelled && len(pr) > 0 && !pr[0].Cancelled {
					t.Errorf("prefill engine did not see the gateway close the leg: %+v", pr[0])
				}
				if tc.decodeCancelled && len(dr) > 0 && !dr[0].Cancelled {
					t.Errorf("decode engine did not see the gateway close the leg: %+v", dr[0])
				}
				for _, r := range append(pr, dr...) {
					if r.Violation != "" {
						t.Errorf("engine reported violation: %s", r.Violation)
					}
				}
				if tc.check != nil {
					tc.check(t, res, f)
				}
			})
		}
	}
}

// TestDecodeStallIdleBound checks that a decode which stalls after its first
// byte is ended by the silence allowance of its body kind: the SSE allowance
// for streams, the rule's (shorter) body allowance otherwise. The other
// allowance is set to an hour, so using the wrong one would leave the client
// waiting until the harness deadline and the outcome would not be an idle end.
func TestDecodeStallIdleBound(t *testing.T) {
	for _, e := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", e, stream), func(t *testing.T) {
				f := startFleet(t, e)
				f.dec.Inject(pdfake.FaultStall, 1)
				opts := shortOptions()
				opts.StreamIdleTimeout, opts.BodyIdleTimeout = time.Hour, 300*time.Millisecond
				if stream {
					opts.StreamIdleTimeout, opts.BodyIdleTimeout = 300*time.Millisecond, time.Hour
				}
				d, _ := pd.New(e, opts)
				pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}
				res := f.do(t, d, pathCompletions, clientBody(pathCompletions, stream), pair, 0)
				idleEnded(t, res, f)
			})
		}
	}
}
