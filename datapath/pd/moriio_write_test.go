package pd_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// writeFleet is a MoRI-IO WRITE fleet whose fakes share a side-channel
// fabric (decodes notify prefills and wait for their push); its decode is
// labelled for concurrent dispatch.
func writeFleet(t *testing.T, fab *pdfake.MoRIIOFabric) (*fleet, spec.Endpoint) {
	t.Helper()
	start := func(addr string, role pdfake.Role) *pdfake.Engine {
		return startVLLMFake(t, addr, role, func(c *pdfake.Config) {
			c.Connector, c.MoRIIOMode, c.MoRIIOFabric, c.RendezvousTimeout = pdfake.ConnectorMoRIIO, "write", fab, 3*time.Second
		})
	}
	f := &fleet{engine: spec.EngineVLLM}
	f.prefill = start("127.0.0.2:0", pdfake.Prefill)
	f.alt = start("127.0.0.3:0", pdfake.Prefill)
	f.dec = start("127.0.0.4:0", pdfake.Decode)
	f.rule = &spec.Rule{Name: "rule-moriio-write", Engine: spec.EngineVLLM, Key: spec.Key{ModelName: "m"}, PD: &spec.PD{}}
	dec := withLabels(func(f *fleet) spec.Endpoint { return f.dec.Endpoint() }, "moriio_write_dispatch", "concurrent")(f)
	return f, dec
}

// TestMoRIIOConcurrentWrite: both legs are in flight at once (the fake
// prefill answers only after the decode notified it, which a sequential
// dispatch cannot do), the prefill leg names the decode's side channel,
// the decode leg the prefill's with the same minted transfer id and no
// relayed handoff, the push reaches the decode and its answer the client.
func TestMoRIIOConcurrentWrite(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			fab := pdfake.NewMoRIIOFabric()
			fab.HoldPrefill = true
			f, dec := writeFleet(t, fab)
			dec.Labels["tp_size"] = "2"
			p := withLabels(func(f *fleet) spec.Endpoint { return f.prefill.Endpoint() }, "tp_size", "4")(f)
			pair := pd.Pair{Prefill: p, Decode: dec, AltPrefill: []spec.Endpoint{f.alt.Endpoint()}}
			res := f.do(t, mustDialect(t, spec.EngineVLLM), pathChat, clientBody(pathChat, stream), pair, 0)
			if res.status != 200 || !strings.Contains(res.body, "fake") || stream != strings.Contains(res.body, "data: [DONE]") {
				t.Fatalf("client got %d: %s", res.status, res.body)
			}
			if res.out.Connector != "moriio" || res.out.Code != "" || res.out.KVTransferFailed || len(res.out.Legs) != 2 {
				t.Errorf("outcome %+v", res.out)
			}
			pl, dl := waitLegs(t, f.prefill, 1)[0], waitLegs(t, f.dec, 1)[0]
			pk, dk := kvParams(t, pl.Body), kvParams(t, dl.Body)
			wantP := map[string]string{"do_remote_decode": "true", "do_remote_prefill": "false", "remote_dp_size": "1", "remote_tp_size": "2",
				"remote_host": `"127.0.0.4"`, "remote_handshake_port": "6301", "remote_notify_port": "61005"}
			wantD := map[string]string{"do_remote_decode": "false", "do_remote_prefill": "true", "remote_dp_size": "1", "remote_tp_size": "4",
				"remote_host": `"127.0.0.2"`, "remote_handshake_port": "6301", "remote_notify_port": "61005", "transfer_id": string(pk["transfer_id"])}
			for k, v := range wantP {
				if string(pk[k]) != v {
					t.Errorf("prefill %s = %s, want %s", k, pk[k], v)
				}
			}
			for k, v := range wantD {
				if string(dk[k]) != v {
					t.Errorf("decode %s = %s, want %s", k, dk[k], v)
				}
			}
			for _, k := range []string{"remote_engine_id", "remote_block_ids"} {
				if _, ok := dk[k]; ok {
					t.Errorf("decode params carry %s before the prefill answered: %v", k, dk)
				}
			}
			if !strings.HasPrefix(string(pk["transfer_id"]), `"xfer-`) {
				t.Errorf("transfer_id = %s", pk["transfer_id"])
			}
			if a, b := pl.Header.Get("X-Request-Id"), dl.Header.Get("X-Request-Id"); a != b || strings.Contains(a, "___") {
				t.Errorf("request ids %q / %q: want one plain id on both legs", a, b)
			}
			tid := strings.Trim(string(pk["transfer_id"]), `"`)
			if ev := fab.Events(); !slices.Contains(ev, "notify "+tid) || !slices.Contains(ev, "push "+tid) {
				t.Errorf("fabric events %v: the decode never got its push", ev)
			}
			if n := len(f.alt.Records()); n != 0 {
				t.Errorf("the alternate prefill got %d legs", n)
			}
			noViolations(t, f.prefill, f.dec)
		})
	}
}

// slowPrefill is a MoRI-IO WRITE prefill (an httptest server, outside any
// fabric) that answers after delay with status and, for 200, the handoff
// params builds from the leg's transfer id.
func slowPrefill(t *testing.T, delay time.Duration, status int, params func(tid string) string) spec.Endpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			KV struct {
				TransferID string `json:"transfer_id"`
			} `json:"kv_transfer_params"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status != 200 {
			_, _ = w.Write([]byte(`{"object":"error","message":"prefill says no","code":` + fmt.Sprint(status) + `}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"a","finish_reason":"length"}],"kv_transfer_params":` + params(body.KV.TransferID) + `}`))
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1, Role: spec.RolePrefill,
		PairFacts: map[string]string{spec.FactKVConnector: pdfake.ConnectorMoRIIO}, Labels: map[string]string{"moriio_mode": "write"}}
}

// quickDecode is a decode that answers 200 at once, before any push (as a
// broken engine might): what it says must never reach the client unless
// the prefill's handoff passed. legs counts what it received.
func quickDecode(t *testing.T, legs *atomic.Int32) spec.Endpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.6:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		legs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"cmpl-2","object":"text_completion","choices":[{"index":0,"text":"DECODE-SPOKE","finish_reason":"stop"}]}`))
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1, Role: spec.RoleDecode,
		PairFacts: map[string]string{spec.FactKVConnector: pdfake.ConnectorMoRIIO},
		Labels:    map[string]string{"moriio_mode": "write", "moriio_write_dispatch": "concurrent"}}
}

// TestMoRIIOConcurrentWriteHoldsDecode: the decode leg is sent at once,
// but its answer (here already complete) reaches the client only after the
// prefill returned a checked handoff naming the ports the decode was told;
// every prefill failure answers as the sequential sequence does and the
// decode's words never reach the client.
func TestMoRIIOConcurrentWriteHoldsDecode(t *testing.T) {
	const good = `{"do_remote_prefill":true,"remote_engine_id":"127.0.0.5:6301","remote_block_ids":[1,2],"remote_host":"127.0.0.5","remote_handshake_port":%d,"remote_notify_port":61005,"transfer_id":"%s"}`
	tests := []struct {
		name   string
		status int // prefill status
		params func(tid string) string
		want   int
		code   string
	}{
		{"good handoff", 200, func(tid string) string { return fmt.Sprintf(good, 6301, tid) }, 200, ""},
		{"foreign transfer", 200, func(string) string { return fmt.Sprintf(good, 6301, "xfer-other") }, 502, pd.CodeMoRIIOHandoffInvalid},
		{"no handoff", 200, func(string) string { return "null" }, 502, pd.CodeMoRIIOHandoffInvalid},
		{"handshake port not the one told", 200, func(tid string) string { return fmt.Sprintf(good, 7000, tid) }, 502, pd.CodeMoRIIOHandoffInvalid},
		{"prefill 500", 500, nil, 500, ""},
		{"prefill 400", 400, nil, 400, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var legs atomic.Int32
			f := &fleet{engine: spec.EngineVLLM, rule: &spec.Rule{Name: "r", Engine: spec.EngineVLLM, Key: spec.Key{ModelName: "m"}, PD: &spec.PD{}}}
			pair := pd.Pair{Prefill: slowPrefill(t, 300*time.Millisecond, tc.status, tc.params), Decode: quickDecode(t, &legs)}
			res := f.do(t, mustDialect(t, spec.EngineVLLM), pathCompletions, clientBody(pathCompletions, false), pair, 0)
			if res.status != tc.want || res.header.Get("X-Infergate-Error") != tc.code {
				t.Fatalf("client got %d %q, want %d %q: %s", res.status, res.header.Get("X-Infergate-Error"), tc.want, tc.code, res.body)
			}
			if spoke := strings.Contains(res.body, "DECODE-SPOKE"); spoke != (tc.want == 200) {
				t.Errorf("decode's answer relayed = %v: %s", spoke, res.body)
			}
			if n := legs.Load(); n != 1 {
				t.Errorf("decode received %d legs, want the one concurrent leg", n)
			}
			if tc.want != 200 && (len(res.out.Legs) != 2 || !res.out.Legs[1].Cancelled || res.out.FailedPhase != pd.PhasePrefill) {
				t.Errorf("outcome %+v: want the decode leg recorded as dropped", res.out)
			}
		})
	}
}

// TestMoRIIOConcurrentWriteFailures: the first leg to fail ends the
// request and the other engine sees its leg dropped; a client that leaves
// drops both.
func TestMoRIIOConcurrentWriteFailures(t *testing.T) {
	t.Run("decode refuses", func(t *testing.T) {
		fab := pdfake.NewMoRIIOFabric()
		fab.HoldPrefill = true // the prefill waits for a notify that never comes
		f, _ := writeFleet(t, fab)
		// The decode refuses once the prefill holds its leg (a refusal
		// before that would only race the prefill's dispatch).
		dec := refusingDecode(t, func(r *http.Request) { _ = f.prefill.WaitReceived(r.Context(), 1) })
		res := f.do(t, mustDialect(t, spec.EngineVLLM), pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dec}, 0)
		if res.status != 400 || !res.out.Relayed || len(res.out.Legs) != 2 || res.out.Legs[1].Status != 400 {
			t.Fatalf("client got %d (outcome %+v): %s", res.status, res.out, res.body)
		}
		if p := waitLegs(t, f.prefill, 1)[0]; !p.Cancelled {
			t.Errorf("the prefill leg was not dropped: %+v", p)
		}
	})
	t.Run("prefill times out", func(t *testing.T) {
		f, dec := writeFleet(t, pdfake.NewMoRIIOFabric())
		f.prefill.Inject(pdfake.FaultHang, 1)
		opts := testOptions()
		opts.PrefillTimeout = 500 * time.Millisecond // well before the decode's first-byte bound
		d, _ := pd.New(spec.EngineVLLM, opts)
		res := f.do(t, d, pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dec}, 0)
		if res.status != 504 || res.header.Get("X-Infergate-Error") != pd.CodePrefillTimeout {
			t.Fatalf("client got %d %q: %s", res.status, res.header.Get("X-Infergate-Error"), res.body)
		}
		if d := waitLegs(t, f.dec, 1)[0]; !d.Cancelled {
			t.Errorf("the decode waiting for its push was not dropped: %+v", d)
		}
	})
	t.Run("client leaves", func(t *testing.T) {
		f, dec := writeFleet(t, pdfake.NewMoRIIOFabric())
		f.prefill.Inject(pdfake.FaultHang, 1)
		f.dec.Inject(pdfake.FaultHang, 1)
		res := f.do(t, mustDialect(t, spec.EngineVLLM), pathCompletions, clientBody(pathCompletions, true), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dec}, -1)
		if !res.out.ClientGone {
			t.Fatalf("outcome %+v", res.out)
		}
		for _, e := range []*pdfake.Engine{f.prefill, f.dec} {
			if r := waitLegs(t, e, 1)[0]; !r.Cancelled {
				t.Errorf("%s: leg not cancelled", e.AddrPort())
			}
		}
	})
}

// refusingDecode is a MoRI-IO WRITE decode (concurrent dispatch) that
// answers 400 after before returns.
func refusingDecode(t *testing.T, before func(*http.Request)) spec.Endpoint {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		before(r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"object":"error","message":"prompt over context window","code":400}`))
	}))
	t.Cleanup(srv.Close)
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	return spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1, Role: spec.RoleDecode,
		PairFacts: map[string]string{spec.FactKVConnector: pdfake.ConnectorMoRIIO},
		Labels:    map[string]string{"moriio_mode": "write", "moriio_write_dispatch": "concurrent", "moriio_host": "127.0.0.9"}}
}

// startVLLMFake starts a vLLM fake on addr for role, set up by with, and
// closes it when the test ends.
func startVLLMFake(t *testing.T, addr string, role pdfake.Role, with func(*pdfake.Config)) *pdfake.Engine {
	t.Helper()
	cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
	cfg.Addr = addr
	with(&cfg)
	e, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}
