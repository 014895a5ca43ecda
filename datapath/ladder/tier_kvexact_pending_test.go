package ladder

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/metrics"
)

// chainIndex is fakeIndex with keys that name their prompt: block i of a
// prompt whose first token is g has key g<<32 | i+1, so two prompts of
// one group share their keys and two groups share none.
type chainIndex struct{ fakeIndex }

func (c *chainIndex) AppendRequestKeys(dst []uint64, tokens []uint32) []uint64 {
	for i := 0; i+4 <= len(tokens); i += 4 {
		dst = append(dst, uint64(tokens[0])<<32|uint64(i/4+1))
	}
	return dst
}

func groupPrompt(g uint32, blocks int) []uint32 {
	ids := make([]uint32, 4*blocks)
	ids[0] = g
	return ids
}

// TestKVExactPending: a prompt just placed on an endpoint counts as held
// there until its events could have arrived, so the group's next request
// follows it instead of being placed again as a miss; only the placed
// prefix counts, only for the TTL, only on a trusted endpoint, and a
// placement the inventory already shows is not noted.
func TestKVExactPending(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const ttl = 2 * time.Second
	all := map[string]string{"a": "", "b": "", "c": ""}
	cost := &pick.CostModel{PerToken: 10 * time.Millisecond, Overhead: -1, PerRequest: 100 * time.Millisecond, Window: 2, BatchSlowdown: -1}
	type placed struct {
		ep     string
		group  uint32
		blocks int
		at     time.Duration
	}
	for _, tc := range []struct {
		name       string
		off        bool // no Pending table
		scores     map[string]kvexact.Score
		trusted    map[string]string
		placements []placed
		group      uint32
		blocks     int
		at         time.Duration
		want       string
		wantReason string
		wantNoted  int // keys in the table after the placements
	}{
		{"placed, not yet published: follows the placement", false, nil, all,
			[]placed{{"b", 7, 16, 0}}, 7, 16, 500 * time.Millisecond, "b", "", 16},
		{"the same without the table: a miss", true, nil, all,
			[]placed{{"b", 7, 16, 0}}, 7, 16, 500 * time.Millisecond, "", ReasonMiss, 0},
		{"after the TTL: a miss", false, nil, all,
			[]placed{{"b", 7, 16, 0}}, 7, 16, ttl, "", ReasonMiss, 16},
		{"another group: a miss", false, nil, all,
			[]placed{{"b", 7, 16, 0}}, 8, 16, 500 * time.Millisecond, "", ReasonMiss, 16},
		{"a longer prompt of the group: the placed prefix", false, nil, all,
			[]placed{{"b", 7, 8, 0}}, 7, 16, 500 * time.Millisecond, "b", "", 8},
		{"an untrusted endpoint's placement does not count", false, nil, map[string]string{"a": "", "b": kvexact.ReasonStale, "c": ""},
			[]placed{{"b", 7, 16, 0}}, 7, 16, 500 * time.Millisecond, "", ReasonMiss, 16},
		{"a published holder with more blocks wins", false, map[string]kvexact.Score{"a": gpu(16)}, all,
			[]placed{{"b", 7, 8, 0}}, 7, 16, 500 * time.Millisecond, "a", "", 8},
		{"a placement the inventory shows is not noted", false, map[string]kvexact.Score{"b": gpu(16)}, all,
			[]placed{{"b", 7, 16, 0}}, 7, 16, 500 * time.Millisecond, "b", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pending *kvexact.Pending
			if !tc.off {
				pending = kvexact.NewPending(ttl)
			}
			m := metrics.NewKVRouting(prometheus.NewRegistry())
			tier := NewKVExact(KVExactOptions{Rule: "r", Index: &chainIndex{fakeIndex{scores: tc.scores, trusted: tc.trusted}},
				LoadGuard: 3, Cost: cost, Pending: pending, Metrics: m})
			cands := []Candidate{{ID: "a"}, {ID: "b", Index: 1}, {ID: "c", Index: 2}}
			for _, p := range tc.placements {
				f := &Facts{Ctx: context.Background(), Tokens: groupPrompt(p.group, p.blocks), Now: t0.Add(p.at)}
				tier.Pick(f, cands) // scores the request: f.KVHeld, as the ladder does before Observe
				tier.Observe(f, Candidate{ID: p.ep})
			}
			if pending != nil {
				if n := pending.Len(); n != tc.wantNoted {
					t.Errorf("noted keys = %d, want %d", n, tc.wantNoted)
				}
			}
			f := &Facts{Ctx: context.Background(), Tokens: groupPrompt(tc.group, tc.blocks), Now: t0.Add(tc.at)}
			idx, reason, ok := tier.Pick(f, cands)
			got := ""
			if ok {
				got = cands[idx].ID
			}
			if got != tc.want || reason != tc.wantReason {
				t.Fatalf("pick = %q reason %q, want %q reason %q", got, reason, tc.want, tc.wantReason)
			}
			wantPending := 0.0
			if got != "" && tc.scores[got].Blocks == 0 {
				wantPending = 1
			}
			if v := cval(m.Tier15Pending.WithLabelValues("r")); v != wantPending {
				t.Errorf("pending hits = %v, want %v", v, wantPending)
			}
			_, _, _, scores := tier.Explain(f, cands)
			for _, s := range scores {
				if s.ID == tc.want && tc.scores[s.ID].Blocks == 0 && s.PendingBlocks == 0 {
					t.Errorf("explain shows no pending blocks on %s: %+v", s.ID, s)
				}
			}
		})
	}
}
