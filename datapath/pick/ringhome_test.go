package pick

import (
	"testing"

	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/spec"
)

// TestKeepRingHome: the home keeps a prefix key while its longer queue
// costs less than the shared head's prefill (defaults: 250 µs per token,
// 100 ms per request, a 16-request batch).
func TestKeepRingHome(t *testing.T) {
	tests := []struct {
		name      string
		home, alt QueueState
		shared    int
		want      bool
	}{
		{"decoding streams only", QueueState{InFlight: 6}, QueueState{InFlight: 2}, 256, true},
		{"home queues beyond its batch", QueueState{InFlight: 18}, QueueState{InFlight: 2}, 256, false},
		{"nothing shared", QueueState{InFlight: 3}, QueueState{InFlight: 2}, 0, false},
		{"engine reports a waiting request, short head", QueueState{InFlight: 5, EngineValid: true, Running: 4, Waiting: 1},
			QueueState{InFlight: 0, EngineValid: true}, 256, false},
		{"engine reports a waiting request, long head", QueueState{InFlight: 5, EngineValid: true, Running: 4, Waiting: 1},
			QueueState{InFlight: 0, EngineValid: true}, 600, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := keepRingHome(CostModel{}, tt.home, tt.alt, tt.shared); got != tt.want {
				t.Errorf("keepRingHome = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRingPickKeepsHome: a CHWBL pool whose home for a key is over the
// load bound keeps a prefix key there while the home only has a batch
// running, and passes it over once the home queues, or for a key that
// holds no prompt head (a session).
func TestRingPickKeepsHome(t *testing.T) {
	ring, err := chwbl.NewRing([]chwbl.Member{{ID: "a", Weight: 1}, {ID: "b", Weight: 1}, {ID: "c", Weight: 1}, {ID: "d", Weight: 1}},
		chwbl.Options{Replication: 100, MeanLoadFactor: 150})
	if err != nil {
		t.Fatal(err)
	}
	const key = 0x9e3779b97f4a7c15
	tests := []struct {
		name     string
		src      chwbl.Source
		shared   int
		homeLoad int64
		wantHome bool
	}{
		{"prefix, home decoding", chwbl.SourcePrefix, 256, 5, true},
		{"prefix, home queueing", chwbl.SourcePrefix, 256, 20, false},
		{"session key", chwbl.SourceSession, 0, 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var skips []int
			p, eps := testPool(spec.SelCHWBL, []int{1, 1, 1, 1}, nil, false)
			p.o.OnRingPick = func(_ chwbl.Source, skipped int) { skips = append(skips, skipped) }
			home := ringHome(ring, key, func(int) bool { return true })
			eps[home].inflight.Store(tt.homeLoad) // over the bound: ceil(1.5 × (load+1)/4) < load+1
			got := p.Pick(&PoolFacts{RingKey: key, RingSrc: tt.src, RingShared: tt.shared}, 0, ring)
			if (got == home) != tt.wantHome {
				t.Fatalf("picked %d, home %d; want home: %v", got, home, tt.wantHome)
			}
			if wantSkip := !tt.wantHome; (skips[0] > 0) != wantSkip {
				t.Errorf("reported %d bound skips, want some: %v", skips[0], wantSkip)
			}
			if i, _ := p.RingChoice(ring, &PoolFacts{RingKey: key, RingSrc: tt.src, RingShared: tt.shared}); i != got {
				t.Errorf("RingChoice = %d, Pick = %d", i, got)
			}
		})
	}
}
