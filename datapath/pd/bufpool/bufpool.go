// Package bufpool keeps a few prompt-sized byte buffers between requests.
//
// A 400 KB prompt's leg bodies and prompt key are hundreds of KB each. A
// fresh buffer of that size costs more than filling it: the runtime zeroes
// it and, after the scavenger has returned the pages, faults every 4 KiB
// page back in. sync.Pool empties itself on every second GC cycle, and
// agent-sized prompts make the collector run about once per request, so it
// missed on about half of them. A Pool here is a short free list that the
// collector leaves alone, bounded in bytes so that an idle gateway pins at
// most that much.
//
// A gateway process keeps one Pool for all its P/D rules (New, from the
// daemon's options, handed down by the datapath): a pool per rule, or per
// compiled generation of a rule, would let the idle memory grow with the
// number of rules and their updates.
package bufpool

import (
	"slices"
	"sync"
)

// Default bounds of a zero Pool.
const (
	// DefaultMaxBytes bounds the bytes a Pool holds between requests, all
	// the rules that share it together: about 70 leg bodies of a 400 KB
	// prompt (450 KB each, room for the decode's transfer params
	// included), or 128 prompt keys of the prefix index's default 256 KiB.
	DefaultMaxBytes = 32 << 20
	// DefaultMaxBuffer bounds one kept buffer: a rare body of many MB is
	// left to the collector rather than pinned.
	DefaultMaxBuffer = 4 << 20
	// DefaultMinBuffer is the smallest buffer kept: a small one costs
	// little to allocate, and a list of thousands of them would make Get's
	// search the expensive part.
	DefaultMinBuffer = 16 << 10
	// maxHeld bounds the buffers kept, whatever their sizes (and so Get's
	// search).
	maxHeld = 128
)

// Options bound the one Pool a gateway process shares among its P/D rules.
type Options struct {
	// MaxBytes bounds the bytes of prompt-sized buffers (leg bodies,
	// prompt keys) kept between requests by all rules together; 0 or
	// negative: DefaultMaxBytes.
	MaxBytes int `yaml:"pd-buffer-pool-bytes"`
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options { return Options{MaxBytes: DefaultMaxBytes} }

// New returns a Pool bounded by o, for every rule of a process to share.
func New(o Options) *Pool { return &Pool{MaxBytes: o.MaxBytes} }

// Pool is a bounded free list of byte buffers. The zero value is ready
// with the default bounds; a nil *Pool allocates on every Get and keeps
// nothing. Safe for concurrent use.
type Pool struct {
	// MaxBytes, MaxBuffer and MinBuffer override the defaults when
	// positive. Set them before first use.
	MaxBytes, MaxBuffer, MinBuffer int

	mu    sync.Mutex
	free  [][]byte // oldest first
	bytes int      // sum of the capacities in free
}

// Get returns an empty buffer of capacity at least n: the most recently
// returned one that is large enough, else a new one.
func (p *Pool) Get(n int) []byte {
	if p != nil {
		p.mu.Lock()
		for i := len(p.free) - 1; i >= 0; i-- {
			if b := p.free[i]; cap(b) >= n {
				// slices.Delete clears the vacated slot: the backing
				// array must not keep b reachable once its user drops it.
				p.free = slices.Delete(p.free, i, i+1)
				p.bytes -= cap(b)
				p.mu.Unlock()
				return b[:0]
			}
		}
		p.mu.Unlock()
	}
	return make([]byte, 0, n)
}

// Put gives b back for a later Get. Only a buffer nothing reads any more
// may be put. A buffer smaller than MinBuffer or larger than MaxBuffer is
// left to the collector. When the pool would exceed MaxBytes (or hold more
// than 128 buffers) the oldest buffers go first, so a pool follows a
// workload whose prompts grow.
func (p *Pool) Put(b []byte) {
	if p == nil {
		return
	}
	// A buffer over MaxBytes could never be kept: refused before the
	// eviction below, which must not empty the pool for nothing.
	max := p.maxBytes()
	if cap(b) < p.minBuffer() || cap(b) > min(p.maxBuffer(), max) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.free) > 0 && (p.bytes+cap(b) > max || len(p.free) >= maxHeld) {
		p.bytes -= cap(p.free[0])
		n := copy(p.free, p.free[1:])
		p.free[n] = nil
		p.free = p.free[:n]
	}
	p.free = append(p.free, b[:0])
	p.bytes += cap(b)
}

// Held is the bytes the pool keeps between requests (0 for a nil Pool).
func (p *Pool) Held() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bytes
}

func (p *Pool) maxBytes() int {
	if p.MaxBytes > 0 {
		return p.MaxBytes
	}
	return DefaultMaxBytes
}

func (p *Pool) minBuffer() int {
	if p.MinBuffer > 0 {
		return p.MinBuffer
	}
	return DefaultMinBuffer
}

func (p *Pool) maxBuffer() int {
	if p.MaxBuffer > 0 {
		return p.MaxBuffer
	}
	return DefaultMaxBuffer
}
