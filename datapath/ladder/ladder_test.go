package ladder

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pick"
)

func cands(role string, loads ...int) []Candidate {
	out := make([]Candidate, len(loads))
	for i, l := range loads {
		out[i] = Candidate{ID: fmt.Sprintf("%s%d", role, i), Index: i, Load: l}
	}
	return out
}

// fixedTier returns a preset answer so ladder ordering can be tested.
type fixedTier struct {
	name     string
	idx      int
	reason   string
	ok       bool
	observed []string
	dry      int
	mu       sync.Mutex
}

func (f *fixedTier) Name() pick.Name { return pick.Name(f.name) }
func (f *fixedTier) Pick(*Facts, []Candidate) (int, string, bool) {
	return f.idx, f.reason, f.ok
}

// DryPick records that the dry path was taken.
func (f *fixedTier) DryPick(fa *Facts, c []Candidate) (int, string, bool) {
	f.mu.Lock()
	f.dry++
	f.mu.Unlock()
	return f.Pick(fa, c)
}

func (f *fixedTier) Observe(_ *Facts, c Candidate) {
	f.mu.Lock()
	f.observed = append(f.observed, c.ID)
	f.mu.Unlock()
}

func TestSelectPairTierOrder(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name        string
		session     string
		prepin      *Pin
		tier        *fixedTier
		prefills    []Candidate
		decodes     []Candidate
		wantPrefill string
		wantDecode  string
		wantSteps   []Step
	}{
		{
			name: "no session key, tier 1 hit", tier: &fixedTier{name: TierPrefix, idx: 1, ok: true},
			prefills: cands("p", 5, 5), decodes: cands("d", 0, 1),
			wantPrefill: "p1", wantDecode: "d0",
			wantSteps: []Step{{Tier: TierSession, Reason: ReasonNoKey}, {Tier: TierPrefix, Hit: true, Choice: "p1"}, {Tier: TierDecode, Hit: true, Choice: "d0", Reason: "least_loaded"}},
		},
		{
			name: "tier 1 miss falls to load", session: "s1", tier: &fixedTier{name: TierPrefix, reason: ReasonBelowThres},
			prefills: cands("p", 4, 2, 3), decodes: cands("d", 3, 1),
			wantPrefill: "p1", wantDecode: "d1",
			wantSteps: []Step{{Tier: TierSession, Reason: ReasonMiss}, {Tier: TierPrefix, Reason: ReasonBelowThres}, {Tier: TierLoad, Hit: true, Choice: "p1"}, {Tier: TierDecode, Hit: true, Choice: "d1", Reason: "least_loaded"}},
		},
		{
			name: "session pin beats tiers and load", session: "s1", prepin: &Pin{Prefill: "p2", Decode: "d0"},
			tier:     &fixedTier{name: TierPrefix, idx: 0, ok: true},
			prefills: cands("p", 0, 0, 9), decodes: cands("d", 9, 0),
			wantPrefill: "p2", wantDecode: "d0",
			wantSteps: []Step{{Tier: TierSession, Hit: true, Choice: "p2"}, {Tier: TierDecode, Hit: true, Choice: "d0", Reason: "pinned"}},
		},
		{
			name: "pinned prefill excluded: pin dropped, re-chosen", session: "s1", prepin: &Pin{Prefill: "gone", Decode: "d0"},
			tier:     &fixedTier{name: TierPrefix, reason: ReasonEmpty},
			prefills: cands("p", 1, 0), decodes: cands("d", 4, 2),
			wantPrefill: "p1", wantDecode: "d1",
			wantSteps: []Step{{Tier: TierSession, Reason: ReasonExcluded}, {Tier: TierPrefix, Reason: ReasonEmpty}, {Tier: TierLoad, Hit: true, Choice: "p1"}, {Tier: TierDecode, Hit: true, Choice: "d1", Reason: "least_loaded"}},
		},
		{
			name: "pinned decode excluded: least loaded decode", session: "s1", prepin: &Pin{Prefill: "p0", Decode: "gone"},
			tier:     &fixedTier{name: TierPrefix, reason: ReasonEmpty},
			prefills: cands("p", 3), decodes: cands("d", 4, 2),
			wantPrefill: "p0", wantDecode: "d1",
			wantSteps: []Step{{Tier: TierSession, Hit: true, Choice: "p0"}, {Tier: TierDecode, Hit: true, Choice: "d1", Reason: "least_loaded"}},
		},
		{
			name: "tier returning a non-candidate is refused", tier: &fixedTier{name: TierPrefix, idx: 7, ok: true},
			prefills: cands("p", 1, 0), decodes: cands("d", 0),
			wantPrefill: "p1", wantDecode: "d0",
			wantSteps: []Step{{Tier: TierSession, Reason: ReasonNoKey}, {Tier: TierPrefix, Reason: ReasonNotChosen}, {Tier: TierLoad, Hit: true, Choice: "p1"}, {Tier: TierDecode, Hit: true, Choice: "d0", Reason: "least_loaded"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSessions(time.Minute, 10)
			if tt.prepin != nil {
				s.Pin(tt.session, tt.prepin.Prefill, tt.prepin.Decode, now)
			}
			l := New(s, tt.tier)
			tr, ok := l.SelectPair(&Facts{SessionKey: tt.session, Now: now}, tt.prefills, tt.decodes)
			if !ok {
				t.Fatal("SelectPair: not ok")
			}
			if tr.Prefill.ID != tt.wantPrefill || tr.Decode.ID != tt.wantDecode {
				t.Fatalf("pair = (%s,%s), want (%s,%s)", tr.Prefill.ID, tr.Decode.ID, tt.wantPrefill, tt.wantDecode)
			}
			if fmt.Sprint(tr.Steps) != fmt.Sprint(tt.wantSteps) {
				t.Fatalf("steps\n got %v\nwant %v", tr.Steps, tt.wantSteps)
			}
			if len(tt.tier.observed) != 1 || tt.tier.observed[0] != tt.wantPrefill {
				t.Fatalf("observer saw %v, want [%s]", tt.tier.observed, tt.wantPrefill)
			}
			if tt.session != "" {
				pin, ok := s.Lookup(tt.session, now)
				if !ok || pin.Prefill != tt.wantPrefill || pin.Decode != tt.wantDecode {
					t.Fatalf("pin after request = %+v %v", pin, ok)
				}
			}
		})
	}
}

func TestSelectPairEmptyRole(t *testing.T) {
	l := New(nil)
	if _, ok := l.SelectPair(&Facts{}, nil, cands("d", 0)); ok {
		t.Fatal("no prefill must not yield a pair")
	}
	if _, ok := l.SelectPair(&Facts{}, cands("p", 0), nil); ok {
		t.Fatal("no decode must not yield a pair")
	}
}

func TestSessionsSlidingTTL(t *testing.T) {
	t0 := time.Unix(0, 0)
	s := NewSessions(10*time.Second, 10)
	s.Pin("k", "p", "d", t0)
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{9 * time.Second, true},   // slides to 19 s
		{18 * time.Second, true},  // slides to 28 s
		{28 * time.Second, true},  // exactly at expiry is still live; slides to 38 s
		{39 * time.Second, false}, // expired
		{40 * time.Second, false}, // and gone
	}
	for _, st := range steps {
		if _, ok := s.Lookup("k", t0.Add(st.at)); ok != st.want {
			t.Fatalf("at %v: live=%v, want %v", st.at, ok, st.want)
		}
	}
}

func TestSessionsBoundedAndDropEndpoint(t *testing.T) {
	now := time.Unix(0, 0)
	s := NewSessions(time.Hour, 3)
	for i := 0; i < 5; i++ {
		s.Pin(fmt.Sprint("k", i), fmt.Sprint("p", i%2), "d", now)
	}
	if s.Len() != 3 {
		t.Fatalf("len = %d, want cap 3", s.Len())
	}
	s.DropEndpoint("p0") // k2, k4 use p0
	if s.Len() != 1 {
		t.Fatalf("after DropEndpoint len = %d, want 1", s.Len())
	}
	if _, ok := s.Lookup("k3", now); !ok {
		t.Fatal("k3 (p1) must survive")
	}
}

func TestSelectPairConcurrent(t *testing.T) {
	l := New(NewSessions(time.Minute, 100), &fixedTier{name: TierPrefix, reason: ReasonMiss})
	p, d := cands("p", 0, 0, 0), cands("d", 0, 0)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				f := &Facts{SessionKey: fmt.Sprint("s", i%20), Now: time.Unix(int64(i), 0)}
				if _, ok := l.SelectPair(f, p, d); !ok {
					t.Error("no pair")
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func BenchmarkSelectPair(b *testing.B) {
	l := New(NewSessions(time.Minute, 1000), &fixedTier{name: TierPrefix, reason: ReasonMiss})
	p, d := cands("p", 3, 1, 4, 1, 5, 9, 2, 6), cands("d", 5, 3, 5, 8)
	f := &Facts{SessionKey: "conv-1", Now: time.Unix(0, 0)}
	b.ReportAllocs()
	for b.Loop() {
		l.SelectPair(f, p, d)
	}
}

func TestExplainHasNoSideEffects(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewSessions(time.Minute, 10)
	s.Pin("kept", "gone", "d0", now) // pinned prefill is excluded below
	tier := &fixedTier{name: TierPrefix, reason: ReasonMiss}
	l := New(s, tier)
	for _, key := range []string{"kept", "fresh"} {
		tr, ok := l.Explain(&Facts{SessionKey: key, Now: now}, cands("p", 1, 0), cands("d", 0))
		if !ok || tr.Prefill.ID != "p1" {
			t.Fatalf("%s: explain = %+v %v", key, tr, ok)
		}
	}
	if _, ok := s.Peek("kept", now); !ok {
		t.Fatal("explain dropped a pin")
	}
	if _, ok := s.Peek("fresh", now); ok {
		t.Fatal("explain stored a pin")
	}
	if len(tier.observed) != 0 {
		t.Fatalf("explain fed the observer: %v", tier.observed)
	}
	if tier.dry != 2 {
		t.Fatalf("explain made %d dry picks, want 2 (one per request)", tier.dry)
	}
}
