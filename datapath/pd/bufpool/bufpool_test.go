package bufpool

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestPoolNil(t *testing.T) {
	var p *Pool
	if b := p.Get(10); len(b) != 0 || cap(b) < 10 {
		t.Errorf("nil pool Get(10): len %d cap %d", len(b), cap(b))
	}
	p.Put(make([]byte, 10)) // must not panic
}

func TestPoolGet(t *testing.T) {
	tests := []struct {
		name  string
		put   int // capacity put back (0: nothing)
		get   int
		reuse bool // Get must return the buffer put back
	}{
		{"empty pool allocates", 0, 100, false},
		{"large enough is reused", 1 << 20, 100, true},
		{"exactly large enough is reused", 64 << 10, 64 << 10, true},
		{"too small is never returned", 32 << 10, 64 << 10, false},
		{"under the minimum is not kept", DefaultMinBuffer - 1, 100, false},
		{"oversized is not kept", DefaultMaxBuffer + 1, 100, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Pool
			var put []byte
			if tc.put > 0 {
				put = make([]byte, 7, tc.put)
				p.Put(put)
			}
			got := p.Get(tc.get)
			if len(got) != 0 || cap(got) < tc.get {
				t.Fatalf("Get(%d): len %d cap %d", tc.get, len(got), cap(got))
			}
			if same := put != nil && &got[:1][0] == &put[:1][0]; same != tc.reuse {
				t.Errorf("Get(%d) returned the buffer of capacity %d put back: %v, want %v", tc.get, tc.put, same, tc.reuse)
			}
			if tc.reuse && p.Held() != 0 {
				t.Errorf("after the reuse the pool still holds %d bytes", p.Held())
			}
		})
	}
}

// TestPoolBudget: the pool never holds more than MaxBytes, evicting the
// oldest buffers first, and a buffer over MaxBuffer is never kept.
func TestPoolBudget(t *testing.T) {
	p := Pool{MaxBytes: 300, MaxBuffer: 200, MinBuffer: 1}
	a, b, c := make([]byte, 0, 100), make([]byte, 0, 100), make([]byte, 0, 150)
	p.Put(a)
	p.Put(b)
	if p.Held() != 200 {
		t.Fatalf("held %d after two 100-byte buffers, want 200", p.Held())
	}
	p.Put(c) // 350 > 300: a, the oldest, goes
	if p.Held() != 250 {
		t.Fatalf("held %d after the third buffer, want 250", p.Held())
	}
	if got := p.Get(120); &got[:1][0] != &c[:1][0] {
		t.Errorf("Get(120) did not return the only buffer large enough")
	}
	if got := p.Get(100); &got[:1][0] != &b[:1][0] {
		t.Errorf("Get(100) did not return the remaining buffer (the evicted one must be gone)")
	}
	p.Put(make([]byte, 0, 201))
	if p.Held() != 0 {
		t.Errorf("a buffer over MaxBuffer was kept: held %d", p.Held())
	}
}

// TestPoolCount: however small the buffers, the pool keeps at most
// maxHeld, the newest.
func TestPoolCount(t *testing.T) {
	p := Pool{MinBuffer: 1}
	var last []byte
	for range 100 {
		last = make([]byte, 0, 10)
		p.Put(last)
	}
	for range maxHeld {
		last = make([]byte, 0, 10)
		p.Put(last)
	}
	if p.Held() != maxHeld*10 {
		t.Fatalf("held %d bytes after %d puts of 10, want %d", p.Held(), 100+maxHeld, maxHeld*10)
	}
	if got := p.Get(10); &got[:1][0] != &last[:1][0] {
		t.Errorf("Get did not return the newest buffer")
	}
}

// TestPoolGetForgets: a buffer Get hands out is no longer referenced by
// the free list's backing array, so a user that drops it (a body that
// outgrew it, say) leaves it to the collector instead of pinning it.
func TestPoolGetForgets(t *testing.T) {
	for _, take := range []int{0, 1, 2} { // which of three is taken: oldest, middle, newest
		p := Pool{MinBuffer: 1}
		bufs := [][]byte{make([]byte, 0, 30), make([]byte, 0, 20), make([]byte, 0, 10)}
		for _, b := range bufs {
			p.Put(b)
		}
		got := p.Get(cap(bufs[take]))
		if &got[:1][0] != &bufs[take][:1][0] {
			t.Fatalf("Get(%d) did not take buffer %d", cap(bufs[take]), take)
		}
		for _, b := range p.free[:cap(p.free)] {
			if cap(b) > 0 && &b[:1][0] == &got[:1][0] {
				t.Errorf("taking buffer %d: the free list's backing array still holds it", take)
			}
		}
	}
}

// TestPoolOverBudget: a buffer larger than MaxBytes (possible when
// MaxBuffer is set above it) is refused without evicting what is kept.
func TestPoolOverBudget(t *testing.T) {
	p := Pool{MaxBytes: 100, MaxBuffer: 200, MinBuffer: 1}
	p.Put(make([]byte, 0, 50))
	p.Put(make([]byte, 0, 150))
	if p.Held() != 50 {
		t.Errorf("held %d after a 150-byte buffer over a 100-byte budget, want the 50 kept before", p.Held())
	}
}

// TestPoolShared: the rules of a process share one Pool (New), so what
// they keep between requests is bounded by its one MaxBytes however many
// rules run at once. Rules here are goroutines that each take and give
// back buffers of their own size; run with -race.
func TestPoolShared(t *testing.T) {
	const rules, rounds, limit = 8, 200, 1 << 20
	p := New(Options{MaxBytes: limit})
	var wg sync.WaitGroup
	var over atomic.Int64
	for r := range rules {
		wg.Add(1)
		go func() {
			defer wg.Done()
			size := (100 + 50*r) << 10 // 100–450 KiB: a rule's prompt size
			for range rounds {
				a, b := p.Get(size), p.Get(size)
				p.Put(a[:size])
				p.Put(b[:size])
				if h := p.Held(); h > limit {
					over.Store(int64(h))
				}
			}
		}()
	}
	wg.Wait()
	if h := over.Load(); h != 0 {
		t.Errorf("the shared pool held %d bytes, over its %d", h, limit)
	}
	if h := p.Held(); h == 0 || h > limit {
		t.Errorf("held %d bytes after the rules ran, want some and at most %d", h, limit)
	}
}

// TestNewDefaults: a zero Options takes the default bound; a nil Pool
// keeps nothing and reports nothing held.
func TestNewDefaults(t *testing.T) {
	if got := New(Options{}).maxBytes(); got != DefaultMaxBytes {
		t.Errorf("zero options: bound %d, want %d", got, DefaultMaxBytes)
	}
	if got := New(DefaultOptions()).maxBytes(); got != DefaultMaxBytes {
		t.Errorf("default options: bound %d, want %d", got, DefaultMaxBytes)
	}
	var p *Pool
	p.Put(make([]byte, 0, 64<<10))
	if p.Held() != 0 {
		t.Errorf("a nil pool holds %d", p.Held())
	}
}

// TestPoolOneOwner: however Gets and Puts interleave, a buffer is handed to
// one user at a time. Each goroutine fills what it got with its own byte,
// lets the others run, and checks nothing else wrote there before giving
// it back; a buffer kept twice, or handed out twice, shows as a foreign
// byte (and, under -race, as a race).
func TestPoolOneOwner(t *testing.T) {
	const users, rounds = 8, 300
	p := New(Options{MaxBytes: 256 << 10})
	p.MinBuffer = 1
	var wg sync.WaitGroup
	var bad atomic.Int64
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := byte(u + 1)
			for r := range rounds {
				n := (1 + (r+u)%4) << 10 // four sizes, so Gets take larger kept buffers too
				b := p.Get(n)[:n]
				for i := range b {
					b[i] = mine
				}
				runtime.Gosched()
				for _, c := range b {
					if c != mine {
						bad.Add(1)
						break
					}
				}
				p.Put(b)
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Errorf("%d buffers were written by another user while held", n)
	}
}
