package pd_test

import (
	"encoding/json"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/clienterr"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

func TestRegistry(t *testing.T) {
	for _, e := range engines {
		if _, ok := pd.For(e); !ok {
			t.Errorf("For(%s) missing", e)
		}
	}
	if _, ok := pd.For(spec.EngineLlamaCpp); ok {
		t.Error("For(llamacpp) returned a dialect; llama.cpp has no P/D sequence")
	}
}

// TestPrefillFailover: a failing first prefill is retried once on
// Pair.AltPrefill, and the retried leg's identity (receipt, bootstrap host)
// names the alternative.
func TestPrefillFailover(t *testing.T) {
	for _, engine := range engines {
		for _, fault := range []pdfake.Fault{pdfake.Fault500, pdfake.FaultDropBeforeFirstByte} {
			if engine == spec.EngineSGLang && fault == pdfake.Fault500 {
				continue // an SGLang 5xx is an answer, never retried
			}
			t.Run(string(engine)+"/"+string(fault), func(t *testing.T) {
				f := startFleet(t, engine)
				f.prefill.Inject(fault, 1)
				pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint(), AltPrefill: []spec.Endpoint{f.alt.Endpoint()}}
				res := f.do(t, mustDialect(t, engine), pathChat, clientBody(pathChat, false), pair, 0)
				if res.status != 200 || res.out.KVTransferFailed {
					t.Fatalf("client got %d (kv failed %v): %s", res.status, res.out.KVTransferFailed, res.body)
				}
				waitLegs(t, f.prefill, 1)
				alt := waitLegs(t, f.alt, 1)[0]
				dec := f.dec.Records()
				last := dec[len(dec)-1]
				switch engine {
				case spec.EngineVLLM:
					want := regexp.MustCompile(`^___prefill_addr_127\.0\.0\.3:19002___decode_addr_127\.0\.0\.4:19003_`)
					if !want.MatchString(alt.Header.Get("X-Request-Id")) || !want.MatchString(last.Header.Get("X-Request-Id")) {
						t.Errorf("receipts do not name the alternative prefill: %q / %q", alt.Header.Get("X-Request-Id"), last.Header.Get("X-Request-Id"))
					}
					if !strings.Contains(string(last.Body), `"remote_host":"127.0.0.3"`) {
						t.Errorf("decode params not from the alternative: %s", last.Body)
					}
					if !res.out.PrefillFailover {
						t.Error("Outcome.PrefillFailover = false")
					}
				case spec.EngineSGLang:
					if !strings.Contains(string(alt.Body), `"bootstrap_host":"127.0.0.3"`) || !strings.Contains(string(last.Body), `"bootstrap_host":"127.0.0.3"`) {
						t.Errorf("retried pair not bootstrapped on the alternative: %s", last.Body)
					}
					if !res.out.RoomRetry {
						t.Error("Outcome.RoomRetry = false")
					}
				case spec.EngineTRTLLM:
					if !res.out.PrefillFailover || last.Violation != "" {
						t.Errorf("failover = %v, generation violation %q", res.out.PrefillFailover, last.Violation)
					}
				}
				if l := res.out.Legs[0]; !(l.Status == 500 || l.Died) {
					t.Errorf("first leg does not report the failure: %+v", l)
				}
			})
		}
	}
}

// TestPrefillFailsTwice: with the retry spent, vLLM decode recomputes and
// SGLang gives up with 502.
func TestPrefillFailsTwice(t *testing.T) {
	tests := []struct {
		engine spec.Engine
		status int
		code   string
	}{
		{spec.EngineVLLM, 200, ""},
		{spec.EngineTRTLLM, 200, ""},
		{spec.EngineSGLang, 502, pd.CodeSGPrefillFailed},
	}
	for _, tc := range tests {
		t.Run(string(tc.engine), func(t *testing.T) {
			f := startFleet(t, tc.engine)
			f.prefill.Inject(pdfake.FaultDropBeforeFirstByte, 1)
			f.alt.Inject(pdfake.FaultDropBeforeFirstByte, 1)
			pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint(), AltPrefill: []spec.Endpoint{f.alt.Endpoint()}}
			res := f.do(t, mustDialect(t, tc.engine), pathCompletions, clientBody(pathCompletions, false), pair, 0)
			if res.status != tc.status || res.out.Code != tc.code {
				t.Fatalf("client got %d %q, want %d %q: %s", res.status, res.out.Code, tc.status, tc.code, res.body)
			}
			if tc.code == "" && !res.out.KVTransferFailed {
				t.Error("decode did not recompute after two prefill deaths")
			}
		})
	}
}

// TestClientDisconnectCancelsLegs: a client that goes away while the legs
// are working makes the engines see their connections close.
func TestClientDisconnectCancelsLegs(t *testing.T) {
	t.Run("sglang both parked", func(t *testing.T) {
		f := startFleet(t, spec.EngineSGLang)
		f.prefill.Inject(pdfake.FaultHang, 1)
		f.dec.Inject(pdfake.FaultHang, 1)
		d, _ := pd.New(spec.EngineSGLang, testOptions())
		res := f.do(t, d, pathCompletions, clientBody(pathCompletions, true), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, -1)
		if !res.out.ClientGone || res.out.Code != pd.CodeClientGone {
			t.Errorf("outcome = %+v, want client gone", res.out)
		}
		if p := waitLegs(t, f.prefill, 1)[0]; !p.Cancelled {
			t.Error("prefill did not see the close")
		}
		if d := waitLegs(t, f.dec, 1)[0]; !d.Cancelled {
			t.Error("decode did not see the close")
		}
	})
	for _, engine := range engines {
		t.Run(string(engine)+" mid-stream", func(t *testing.T) {
			f := startFleet(t, engine)
			f.dec.Inject(pdfake.FaultStall, 1)
			d, _ := pd.New(engine, testOptions())
			res := f.do(t, d, pathCompletions, clientBody(pathCompletions, true), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, 8)
			if !res.out.ClientGone || res.out.IdleTimeout {
				t.Errorf("outcome = %+v, want client gone", res.out)
			}
			if d := waitLegs(t, f.dec, 1)[0]; !d.Cancelled {
				t.Error("decode did not see the close")
			}
		})
	}
}

func TestTRTEarlyExit(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+map[bool]string{false: "false", true: "true"}[stream], func(t *testing.T) {
			f := startFleet(t, spec.EngineTRTLLM)
			f.prefill.SetFinishReason("stop")
			res := f.do(t, mustDialect(t, spec.EngineTRTLLM), pathCompletions, clientBody(pathCompletions, stream), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, 0)
			if res.status != 200 || !res.out.EarlyExit {
				t.Fatalf("client got %d early exit %v: %s", res.status, res.out.EarlyExit, res.body)
			}
			if !strings.Contains(res.body, "DONE.") {
				t.Errorf("client did not get the context's answer: %s", res.body)
			}
			if stream {
				events := strings.Split(strings.TrimSuffix(res.body, "\n\n"), "\n\n")
				if len(events) != 2 || events[1] != "data: [DONE]" || !strings.HasPrefix(events[0], "data: {") {
					t.Errorf("early exit is not a one-event SSE stream: %q", res.body)
				}
				if ct := res.header.Get("Content-Type"); ct != "text/event-stream" {
					t.Errorf("Content-Type = %q", ct)
				}
			} else if !json.Valid([]byte(res.body)) {
				t.Errorf("early exit body is not JSON: %s", res.body)
			}
			waitLegs(t, f.prefill, 1)
			if n := len(f.dec.Records()); n != 0 {
				t.Errorf("generation got %d requests after an early exit", n)
			}
		})
	}
}

// TestTRTUnknownFieldRelayed: the engine's extra="forbid" 400 reaches the
// client (the gateway adds nothing the engine would reject).
func TestTRTUnknownFieldRelayed(t *testing.T) {
	f := startFleet(t, spec.EngineTRTLLM)
	body := `{"model":"m","prompt":"p","best_of_tokens":1}`
	res := f.do(t, mustDialect(t, spec.EngineTRTLLM), pathCompletions, body, pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, 0)
	if res.status != 400 || !strings.Contains(res.body, "extra_forbidden: best_of_tokens") {
		t.Errorf("client got %d: %s", res.status, res.body)
	}
	if n := len(f.dec.Records()); n != 0 {
		t.Errorf("generation got %d requests", n)
	}
}

func TestUnreachableDecode(t *testing.T) {
	dead := spec.Endpoint{ID: "127.0.0.9:1", Addr: netip.MustParseAddrPort("127.0.0.9:1"), Role: spec.RoleDecode}
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			f := startFleet(t, engine)
			res := f.do(t, mustDialect(t, engine), pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dead}, 0)
			if res.status != 503 || res.header.Get(clienterr.Header) != pd.CodePoolUnavailable {
				t.Errorf("client got %d %q: %s", res.status, res.header.Get(clienterr.Header), res.body)
			}
			last := res.out.Legs[len(res.out.Legs)-1]
			if last.Phase != pd.PhaseDecode || !last.NotSent {
				t.Errorf("decode leg not reported as a connect failure: %+v", last)
			}
			waitLegs(t, f.prefill, anyLegs)
		})
	}
}

func TestInvalidBody(t *testing.T) {
	for _, engine := range engines {
		f := startFleet(t, engine)
		res := f.do(t, mustDialect(t, engine), pathCompletions, `["not an object"]`, pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, 0)
		if res.status != 400 || res.header.Get(clienterr.Header) != pd.CodeInvalidBody {
			t.Errorf("%s: client got %d: %s", engine, res.status, res.body)
		}
		if n := len(f.prefill.Records()) + len(f.dec.Records()); n != 0 {
			t.Errorf("%s: engines got %d requests for an invalid body", engine, n)
		}
	}
}

// TestOversizedPrefillResponse: params that cannot be buffered are a KV
// transfer failure, not an error: decode recomputes.
func TestOversizedPrefillResponse(t *testing.T) {
	for _, engine := range []spec.Engine{spec.EngineVLLM, spec.EngineTRTLLM} {
		t.Run(string(engine), func(t *testing.T) {
			f := startFleet(t, engine)
			opts := testOptions()
			opts.MaxPrefillResponse = 64
			d, _ := pd.New(engine, opts)
			res := f.do(t, d, pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, 0)
			if res.status != 200 || !res.out.KVTransferFailed || res.out.PrefillFailover {
				t.Errorf("client %d, outcome %+v; want 200 with KV transfer failure and no retry", res.status, res.out)
			}
			if l := res.out.Legs[0]; l.Died || l.Status != 200 {
				t.Errorf("oversized answer reported as a transport death: %+v", l)
			}
		})
	}
}

// TestDecodeFailover: a decode whose connection fails (the engine never got
// the request) is replaced by the next decode, on every dialect, and the
// live decode gets a protocol-correct leg (vLLM: the prefill's params and an
// id naming the live decode; SGLang: a room its prefill joins; TRT-LLM: the
// context's disaggregated_params).
func TestDecodeFailover(t *testing.T) {
	dead := spec.Endpoint{ID: "127.0.0.9:1", Addr: netip.MustParseAddrPort("127.0.0.9:1"), Role: spec.RoleDecode}
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			f := startFleet(t, engine)
			pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dead, AltDecode: []spec.Endpoint{f.dec.Endpoint()}}
			res := f.do(t, mustDialect(t, engine), pathCompletions, clientBody(pathCompletions, false), pair, 0)
			if res.status != 200 || !res.out.DecodeFailover {
				t.Fatalf("client got %d (failover %v): %s", res.status, res.out.DecodeFailover, res.body)
			}
			var decodes []pd.LegResult
			for _, l := range res.out.Legs {
				if l.Phase == pd.PhaseDecode {
					decodes = append(decodes, l)
				}
			}
			if len(decodes) != 2 || !decodes[0].NotSent || decodes[0].Endpoint.ID != dead.ID ||
				decodes[1].Endpoint.ID != f.dec.Endpoint().ID || decodes[1].Status != 200 {
				t.Errorf("decode legs = %+v; want the dead one (not sent), then the live one (200)", decodes)
			}
			recs := f.dec.Records()
			if len(recs) != 1 || recs[0].Violation != "" {
				t.Fatalf("live decode records = %+v; want one protocol-correct leg", recs)
			}
			if engine == spec.EngineVLLM && !strings.Contains(recs[0].Header.Get("X-Request-Id"), "___decode_addr_"+f.dec.Endpoint().Addr.Addr().String()) {
				t.Errorf("vLLM decode id %q does not name the live decode", recs[0].Header.Get("X-Request-Id"))
			}
		})
	}
}

func TestUnreachableDecodeNoAlternate(t *testing.T) {
	dead := spec.Endpoint{ID: "127.0.0.9:1", Addr: netip.MustParseAddrPort("127.0.0.9:1"), Role: spec.RoleDecode}
	f := startFleet(t, spec.EngineVLLM)
	pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dead, AltDecode: []spec.Endpoint{dead}}
	res := f.do(t, mustDialect(t, spec.EngineVLLM), pathCompletions, clientBody(pathCompletions, false), pair, 0)
	if res.status != 503 || res.header.Get(clienterr.Header) != pd.CodePoolUnavailable {
		t.Errorf("every decode unreachable: client got %d %s", res.status, res.body)
	}
}
