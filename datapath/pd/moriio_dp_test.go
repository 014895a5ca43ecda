package pd_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// dpMoRIFleet is a MoRI-IO fleet in mode whose prefill runs prefillDP
// ranks and whose decode runs decodeDP (a WRITE fleet shares a side-channel
// fabric: a decode that notifies another rank than the prefill ran on, or
// a prefill told fewer decode ranks than the decode's, gets no push).
func dpMoRIFleet(t *testing.T, mode string, prefillDP, decodeDP int) *fleet {
	t.Helper()
	var fab *pdfake.MoRIIOFabric
	if mode == "write" {
		fab = pdfake.NewMoRIIOFabric()
	}
	start := func(addr string, role pdfake.Role, dp int) *pdfake.Engine {
		return startVLLMFake(t, addr, role, func(c *pdfake.Config) {
			c.Connector, c.MoRIIOMode, c.MoRIIOFabric, c.DPSize, c.RendezvousTimeout = pdfake.ConnectorMoRIIO, mode, fab, dp, 3*time.Second
		})
	}
	f := &fleet{engine: spec.EngineVLLM}
	f.prefill = start("127.0.0.2:0", pdfake.Prefill, prefillDP)
	f.dec = start("127.0.0.4:0", pdfake.Decode, decodeDP)
	f.rule = &spec.Rule{Name: "rule-moriio-dp", Engine: spec.EngineVLLM, Key: spec.Key{ModelName: "m"}, PD: &spec.PD{}}
	return f
}

// TestMoRIIODPRanks: a MoRI-IO prefill with DP 4 serves (once refused
// with 503 moriio_pair_misconfigured): each prefill leg is pinned to one
// rank (X-data-parallel-rank) and told the decode's DP size, and the
// decode leg names that rank (remote_dp_rank) and the prefill's DP size;
// the decode, itself DP 2, is not pinned. The rank is the KV-exact
// tier's, else the least loaded (rank 2: the others each hold a leg).
// In WRITE mode the fabric pushes only when the decode notified the rank
// the transfer ran on, from a decode rank the prefill was told of.
func TestMoRIIODPRanks(t *testing.T) {
	for _, mode := range []string{"read", "write", "write-concurrent"} {
		for _, kvExact := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/kv-exact=%v", mode, kvExact), func(t *testing.T) {
				fm := mode
				if mode == "write-concurrent" {
					fm = "write"
				}
				f := dpMoRIFleet(t, fm, 4, 2)
				dec := f.dec.Endpoint()
				if mode == "write-concurrent" {
					dec = withLabels(func(*fleet) spec.Endpoint { return dec }, "moriio_write_dispatch", "concurrent")(f)
				}
				p := f.prefill.Endpoint()
				pair := pd.Pair{Prefill: p, Decode: dec}
				load := new(pd.RankLoad)
				if kvExact {
					pair.PrefillDPRank, pair.HasPrefillDPRank = 2, true
				} else {
					for _, r := range []int{0, 1, 3} {
						defer load.Hold(r)()
					}
				}
				f.ids = loadedRanks{load: map[string]*pd.RankLoad{p.ID: load}}
				const n = 4
				for i := range n {
					res := f.do(t, mustDialect(t, spec.EngineVLLM), pathCompletions, clientBody(pathCompletions, i%2 == 1), pair, 0)
					if res.status != 200 || res.out.Code != "" {
						t.Fatalf("request %d: client got %d %q: %s", i, res.status, res.out.Code, res.body)
					}
				}
				pre, decs := waitLegs(t, f.prefill, n), waitLegs(t, f.dec, n)
				for i := range n {
					if h := pre[i].Header.Get("X-data-parallel-rank"); h != "2" {
						t.Errorf("prefill leg %d pinned to rank %q, want 2", i, h)
					}
					pk := kvParams(t, pre[i].Body)
					if string(pk["remote_dp_size"]) != "2" {
						t.Errorf("prefill leg %d told decode DP size %s, want 2", i, pk["remote_dp_size"])
					}
					var tid string
					_ = json.Unmarshal(pk["transfer_id"], &tid)
					if r := f.prefill.TransferRank(tid); r != 2 {
						t.Errorf("transfer %s ran on rank %d", tid, r)
					}
					// The decode legs arrive in the same order (one request at a time).
					dk := kvParams(t, decs[i].Body)
					if string(dk["remote_dp_rank"]) != "2" || string(dk["remote_dp_size"]) != "4" {
						t.Errorf("decode leg %d: remote_dp_rank %s remote_dp_size %s, want 2 and 4", i, dk["remote_dp_rank"], dk["remote_dp_size"])
					}
					if h := decs[i].Header.Get("X-data-parallel-rank"); h != "" {
						t.Errorf("decode leg %d pinned to rank %q: its own balancer places it", i, h)
					}
				}
				if got := load.InFlight(2); got != 0 {
					t.Errorf("rank 2 still counts %d legs", got)
				}
				noViolations(t, f.prefill, f.dec)
			})
		}
	}
}
