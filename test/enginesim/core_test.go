package enginesim

import (
	"testing"
	"time"
)

// tokens returns n distinct token ids starting at base.
func tokens(base uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func join(parts ...[]uint32) []uint32 {
	var out []uint32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func newTestCore(t *testing.T, mut func(*Options)) *Core {
	t.Helper()
	o := DefaultOptions()
	if mut != nil {
		mut(&o)
	}
	c, err := NewCore(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// drain runs the core in virtual time until it is idle and returns the
// time reached.
func drain(t *testing.T, c *Core, now time.Duration) time.Duration {
	t.Helper()
	for i := 0; ; i++ {
		if i > 100_000 {
			t.Fatal("core never went idle")
		}
		d, busy := c.Plan(now)
		if !busy {
			return now
		}
		now += d
		c.Complete(now)
	}
}

// firstToken runs until s has its first token and returns its time.
func firstToken(t *testing.T, c *Core, s *Seq, now time.Duration) time.Duration {
	t.Helper()
	for i := 0; i < 10_000; i++ {
		d, busy := c.Plan(now)
		if !busy {
			t.Fatal("core idle before the first token")
		}
		now += d
		c.Complete(now)
		select {
		case ev := <-s.Events():
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			return ev.At
		default:
		}
	}
	t.Fatal("no first token")
	return 0
}

// TestCacheHitShortensPrefill: the first-token time of a request on an idle
// engine is the prefill overhead plus the per-token cost of exactly the
// prompt tokens the cache did not hold.
func TestCacheHitShortensPrefill(t *testing.T) {
	shared := tokens(1000, 512) // 32 blocks
	cases := []struct {
		name       string
		warm       []uint32 // served first, to completion
		prompt     []uint32
		wantCached int
	}{
		{"cold", nil, join(shared, tokens(9000, 100)), 0},
		{"shared prefix", join(shared, tokens(5000, 100)), join(shared, tokens(9000, 100)), 512},
		{"half the prefix", shared[:256], join(shared, tokens(9000, 100)), 256},
		{"same prompt recomputes its last block", join(shared, tokens(9000, 96)), join(shared, tokens(9000, 96)), 592},
		{"different first block", join(tokens(7, 16), shared), join(shared, tokens(9000, 100)), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCore(t, nil)
			now := time.Duration(0)
			if tc.warm != nil {
				c.Add(Request{Tokens: tc.warm, MaxTokens: 2}, now)
				now = drain(t, c, now)
			}
			start := now
			s := c.Add(Request{Tokens: tc.prompt, MaxTokens: 4}, now)
			got := firstToken(t, c, s, now) - start
			o := c.opts
			want := o.PrefillOverhead + time.Duration(len(tc.prompt)-tc.wantCached)*o.PrefillPerToken
			if s.CachedTokens() != tc.wantCached || got != want {
				t.Fatalf("cached %d tokens, TTFT %v; want %d, %v", s.CachedTokens(), got, tc.wantCached, want)
			}
		})
	}
}

// TestChunkedPrefillAndDecodeStep: a long prompt is computed in chunks of
// the step budget, and decode steps grow with the batch.
func TestChunkedPrefillAndDecodeStep(t *testing.T) {
	c := newTestCore(t, func(o *Options) { o.MaxBatchedTokens = 100; o.MaxNumSeqs = 5 })
	o := c.opts
	s := c.Add(Request{Tokens: tokens(1, 250), MaxTokens: 3}, 0)
	want := []time.Duration{
		o.PrefillOverhead + 100*o.PrefillPerToken,
		100 * o.PrefillPerToken,
		50 * o.PrefillPerToken, // first token
		o.DecodeStep,
		o.DecodeStep,
	}
	now := time.Duration(0)
	for i, w := range want {
		d, busy := c.Plan(now)
		if !busy || d != w {
			t.Fatalf("step %d: %v busy=%v, want %v", i, d, busy, w)
		}
		now += d
		c.Complete(now)
	}
	if _, busy := c.Plan(now); busy {
		t.Fatal("still busy after 3 tokens")
	}
	if n := len(s.Events()); n != 4 { // three tokens and Done
		t.Fatalf("%d events, want 4", n)
	}

	// Five running decodes: the full-load factor applies.
	c = newTestCore(t, func(o *Options) { o.MaxNumSeqs = 5 })
	for i := range 5 {
		c.Add(Request{Tokens: tokens(uint32(100*i), 8), MaxTokens: 10}, 0)
	}
	d, _ := c.Plan(0) // five prefills
	c.Complete(d)
	if d2, _ := c.Plan(d); d2 != time.Duration(float64(o.DecodeStep)*o.LoadFactor) {
		t.Fatalf("decode step with 5/5 running = %v, want %v", d2, time.Duration(float64(o.DecodeStep)*o.LoadFactor))
	}
}

// TestQueueBeyondMaxNumSeqs: requests above max-num-seqs wait in FIFO order
// and start when a running one finishes.
func TestQueueBeyondMaxNumSeqs(t *testing.T) {
	c := newTestCore(t, func(o *Options) { o.MaxNumSeqs = 2 })
	seqs := []*Seq{
		c.Add(Request{Tokens: tokens(1, 32), MaxTokens: 2}, 0),
		c.Add(Request{Tokens: tokens(100, 32), MaxTokens: 5}, 0),
		c.Add(Request{Tokens: tokens(200, 32), MaxTokens: 2}, 0),
	}
	now := time.Duration(0)
	d, _ := c.Plan(now)
	if st := c.Stats(); st.Running != 2 || st.Waiting != 1 || seqs[2].admitted {
		t.Fatalf("running %d waiting %d (third admitted %v), want 2 and 1", st.Running, st.Waiting, seqs[2].admitted)
	}
	now += d
	c.Complete(now)
	d, _ = c.Plan(now) // both decode: the first finishes at this step's end
	now += d
	c.Complete(now)
	if _, busy := c.Plan(now); !busy || !seqs[2].admitted {
		t.Fatal("the waiting request did not start after the first finished")
	}
	if st := c.Stats(); st.Running != 2 || st.Waiting != 0 || st.Finished != 1 {
		t.Fatalf("running %d waiting %d finished %d, want 2, 0, 1", st.Running, st.Waiting, st.Finished)
	}
}

// TestKVCapacityWaitsAndEvicts: a request that does not fit the free and
// evictable blocks waits; cached blocks are evicted least recently used
// first, tail before head.
func TestKVCapacityWaitsAndEvicts(t *testing.T) {
	c := newTestCore(t, func(o *Options) { o.KVBlocks = 10 })
	a := c.Add(Request{Tokens: tokens(1, 96), MaxTokens: 16}, 0)   // 6 + 1 blocks
	b := c.Add(Request{Tokens: tokens(500, 64), MaxTokens: 16}, 0) // 4 + 1 blocks
	c.Plan(0)
	if !a.admitted || b.admitted {
		t.Fatalf("admitted a=%v b=%v, want only a (b needs 5 of 3 free blocks)", a.admitted, b.admitted)
	}
	now := drain(t, c, 0)
	if !b.admitted {
		t.Fatal("b never admitted")
	}
	// a's six prompt blocks were cached; b needed 5 blocks with 4 free, so
	// a's last block went first.
	ha, hb := c.BlockHashes(a.req.Tokens), c.BlockHashes(b.req.Tokens)
	if c.Cached(ha[5]) || !c.Cached(ha[0]) || !c.Cached(hb[2]) {
		t.Fatalf("after eviction: a[5] %v a[0] %v b[2] %v; want false true true", c.Cached(ha[5]), c.Cached(ha[0]), c.Cached(hb[2]))
	}
	_ = now
	// A prompt larger than the whole cache is refused, not queued forever.
	big := c.Add(Request{Tokens: tokens(9000, 200), MaxTokens: 1}, now)
	c.Plan(now)
	if ev := <-big.Events(); !ev.Done || ev.Err != ErrTooLong {
		t.Fatalf("oversized request: %+v, want ErrTooLong", ev)
	}
}

// TestRemotePrefillPaysTransfer: a decode leg pulls the blocks it lacks
// (TransferPerToken each) and decodes without computing the prompt.
func TestRemotePrefillPaysTransfer(t *testing.T) {
	c := newTestCore(t, func(o *Options) { o.Role = RoleDecode })
	o := c.opts
	s := c.Add(Request{Tokens: tokens(1, 1000), MaxTokens: 2, RemotePrefill: true}, 0)
	d, busy := c.Plan(0)
	if want := 1000 * o.TransferPerToken; !busy || d != want {
		t.Fatalf("first step %v, want the transfer %v", d, want)
	}
	c.Complete(d)
	if at := firstToken(t, c, s, d); at != d+o.DecodeStep {
		t.Fatalf("first token at %v, want %v", at, d+o.DecodeStep)
	}
	if st := c.Stats(); st.TransferredTokens != 1000 || st.PrefillComputeTime != 0 {
		t.Fatalf("transferred %d, prefill time %v; want 1000 and 0", st.TransferredTokens, st.PrefillComputeTime)
	}
}
