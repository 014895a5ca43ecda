package datapath

import (
	"context"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/kvexact/zmqsub"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/test/extprocclient"
)

// TestTeachesFirstToken: only a priced single-pool pick's 2xx event
// stream, passed on chunk by chunk and served where it was priced, is a
// first-token time the cost model may learn from.
func TestTeachesFirstToken(t *testing.T) {
	addrs := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:8000"), netip.MustParseAddrPort("10.0.0.2:8000")}
	c := &compiled{rule: &spec.Rule{Endpoints: []spec.Endpoint{{Addr: addrs[0]}, {Addr: addrs[1]}}}}
	placed := &pick.Placed{}
	stream := epp.Outcome{Status: 200, EventStream: true, Incremental: true}
	with := func(f func(*epp.Outcome)) epp.Outcome { o := stream; f(&o); return o }
	tests := []struct {
		name    string
		placed  *pick.Placed
		prefill int
		o       epp.Outcome
		want    bool
	}{
		{"streamed 2xx on the priced endpoint", placed, -1, with(func(o *epp.Outcome) { o.Endpoint = addrs[0].String() }), true},
		{"served endpoint not reported", placed, -1, stream, true},
		{"served by a fallback", placed, -1, with(func(o *epp.Outcome) { o.Endpoint = addrs[1].String() }), false},
		{"not placed by the cost model", nil, -1, stream, false},
		{"P/D pair: prefill time unseen", placed, 1, stream, false},
		{"not an event stream", placed, -1, with(func(o *epp.Outcome) { o.EventStream = false }), false},
		{"body arrived whole", placed, -1, with(func(o *epp.Outcome) { o.Incremental = false }), false},
		{"error status", placed, -1, with(func(o *epp.Outcome) { o.Status = 503 }), false},
		{"response headers skipped", placed, -1, with(func(o *epp.Outcome) { o.Status = 0 }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tk := &eppTicket{c: c, primary: 0, prefill: tc.prefill, placed: tc.placed}
			if got := tk.teachesFirstToken(tc.o); got != tc.want {
				t.Fatalf("teachesFirstToken = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEPPLearnsFirstToken: requests picked through the EPP and answered as
// event streams move their endpoints' learned costs (the estimate the next
// pick is priced with); the same requests answered with whole JSON bodies
// teach nothing.
func TestEPPLearnsFirstToken(t *testing.T) {
	const (
		n     = 3
		delay = 150 * time.Millisecond // from the pick to the first chunk: far above the 38 ms estimate
	)
	tests := []struct {
		name        string
		contentType string
		learns      bool
	}{
		{"event stream teaches", "text/event-stream", true},
		{"JSON body releases only", "application/json", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			ks := &kvSinks{sinks: map[string]zmqsub.Sink{}}
			o.KV.StartSub = ks.start
			rt, _ := newTestRuntime(t, o)
			r := newRule("127.0.0.1", freePort(t), spec.SelLeastConn, epFor(t, startEngine(t, "a").Addr(), 1), epFor(t, startEngine(t, "b").Addr(), 1))
			r.Name, r.Engine = "epp-learn", spec.EngineVLLM
			r.KV = &spec.KV{Mode: 3, ZMQPort: freePort(t), BlockSize: 16, DPRanks: 1, Warmup: time.Millisecond}
			ks.installConnected(t, rt, r)
			waitFor(t, 5*time.Second, "a trusted inventory", func() bool {
				for _, row := range rt.KVPlane().KVInventory() {
					if !row.Trusted {
						return false
					}
				}
				return true
			})
			costs := rt.KVPlane().Costs()
			prior := costs.Model().PerToken

			_, addr, _ := serveEPP(t, rt.EPPPicker(r.Name), true)
			cc, err := extprocclient.Dial(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			for i := range n {
				x, err := extprocclient.Start(context.Background(), cc, extprocclient.Request{
					Headers: extprocclient.Headers(":method", "POST", ":path", pathCompletions, ":authority", "gw"),
					Body:    []byte(idsPrompt(tokenRun(uint32(9000+100*i), 32))), // a miss every time
				})
				if err != nil {
					t.Fatal(err)
				}
				pk, err := x.Pick()
				if err != nil || pk.Status != 0 {
					t.Fatalf("pick %d: %v %+v", i, err, pk)
				}
				time.Sleep(delay)
				if err := x.ResponseHeaders(http.StatusOK, pk.Endpoints[0], true, extprocclient.Header{Key: "content-type", Value: tc.contentType}); err != nil {
					t.Fatal(err)
				}
				if err := x.ResponseBody([]byte("data: {}\n\n"), false); err != nil {
					t.Fatal(err)
				}
				if err := x.ResponseBody([]byte("data: [DONE]\n\n"), true); err != nil {
					t.Fatal(err)
				}
				if err := x.Finish(); err != nil {
					t.Fatal(err)
				}
			}

			var samples int64
			for _, ep := range r.Endpoints {
				tok, _, k := costs.Learned(ep.ID)
				samples += k
				if k > 0 && tok <= prior {
					t.Errorf("%s: per-token cost %v after %d slow first tokens, want above the prior %v", ep.ID, tok, k, prior)
				}
				if k == 0 && tok != prior {
					t.Errorf("%s: per-token cost %v moved without a sample", ep.ID, tok)
				}
				now := time.Now()
				if est := costs.Estimate(&pick.Candidate{ID: ep.ID}, now, 32, 0); est.Backlog != 0 {
					t.Errorf("%s: backlog %v left after every pick was settled", ep.ID, est.Backlog)
				}
			}
			if want := map[bool]int64{true: n, false: 0}[tc.learns]; samples != want {
				t.Fatalf("%d observations learned, want %d", samples, want)
			}
		})
	}
}
