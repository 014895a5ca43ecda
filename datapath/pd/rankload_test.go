package pd_test

import (
	"strconv"
	"testing"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/spec"
)

// loadedRanks is rankIDs with the per-rank in-flight counters the
// datapath keeps on each endpoint.
type loadedRanks struct {
	rankIDs
	load map[string]*pd.RankLoad
}

func (l loadedRanks) RankLoad(id string) *pd.RankLoad { return l.load[id] }

// TestMooncakeDPLeastLoadedRank: without a KV-exact rank, a multi-rank
// prefill's leg goes to the rank with the fewest legs in flight (here
// rank 2, the others each holding one), and the leg's own hold is
// released when it ends.
func TestMooncakeDPLeastLoadedRank(t *testing.T) {
	f, p := dpFleet(t, 4)
	load := new(pd.RankLoad)
	for _, r := range []int{0, 1, 3} {
		defer load.Hold(r)()
	}
	f.ids = loadedRanks{rankIDs: f.ids.(rankIDs), load: map[string]*pd.RankLoad{p.ID: load}}
	d := mustDialect(t, spec.EngineVLLM)
	const n = 6
	for i := range n {
		res := f.do(t, d, pathCompletions, clientBody(pathCompletions, i%2 == 1), pd.Pair{Prefill: p, Decode: f.dec.Endpoint()}, 0)
		if res.status != 200 || res.out.KVTransferFailed {
			t.Fatalf("request %d: client got %d, outcome %+v: %s", i, res.status, res.out, res.body)
		}
	}
	for i, rec := range waitLegs(t, f.prefill, n) {
		if got := rec.Header.Get("X-data-parallel-rank"); got != "2" {
			t.Errorf("prefill leg %d pinned to rank %q, want the idle rank 2", i, got)
		}
	}
	for r, want := range []int64{1, 1, 0, 1} {
		if got := load.InFlight(r); got != want {
			t.Errorf("rank %d: %d legs in flight after the requests, want %d", r, got, want)
		}
	}
	noViolations(t, f.prefill, f.dec)
}

// TestRankLoadHold: a hold counts until released, a second release does
// nothing, and ranks outside the counted range read as idle.
func TestRankLoadHold(t *testing.T) {
	var l pd.RankLoad
	if got := l.InFlight(0); got != 0 {
		t.Fatalf("zero value: %d in flight", got)
	}
	a, b := l.Hold(3), l.Hold(3)
	if got := l.InFlight(3); got != 2 {
		t.Fatalf("two holds: %d in flight", got)
	}
	a()
	a()
	if got := l.InFlight(3); got != 1 {
		t.Fatalf("released once twice: %d in flight, want 1", got)
	}
	b()
	for _, r := range []int{-1, 1 << 20} {
		l.Hold(r)()
		if got := l.InFlight(r); got != 0 {
			t.Errorf("rank %s: %d in flight", strconv.Itoa(r), got)
		}
	}
	var nilLoad *pd.RankLoad
	nilLoad.Hold(1)()
	if got := nilLoad.InFlight(1); got != 0 {
		t.Errorf("nil counter: %d in flight", got)
	}
}
