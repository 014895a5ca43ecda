package kvexact

import (
	"sync"
	"time"
)

// Pending holds the prompt blocks the gateway has just sent to an endpoint
// that the endpoint has not published yet. Engines publish BlockStored in
// batches (llm-d-inference-sim every second, vLLM once per scheduler step
// after the prefill), so for about half a second at the median, and over a
// second on a loaded box, after a prompt group is placed on an engine the
// inventory says nobody holds it. A second request of the
// group arriving in that gap was treated as a miss and placed again by
// load — usually elsewhere, since the first engine now runs the group's
// first request — so the group ended up cached on two engines, each engine's
// working set grew by a group, and under overload the extra copies evicted
// other groups' prefixes. Pending lets the KV-exact tier count those
// blocks as held by the endpoint they were sent to, for a short TTL, until
// the engine's own events take over.
//
// Keys are the inventory's own chained block keys (AppendRequestKeys), so
// a key names its whole prefix and what an endpoint was sent is closed
// under prefixes: Held finds the longest one by binary search. A note
// refreshes every key of the prompt, so a prefix key never expires before
// a longer key noted with it, which keeps the search exact.
//
// Pending is a pure data structure (times are passed in) and safe for
// concurrent use. It is bounded: past MaxPendingKeys noted keys the oldest
// are forgotten first.
type Pending struct {
	ttl time.Duration

	mu    sync.Mutex
	until map[pendingKey]int64 // unix nanos the key stops counting
	order []pendingNote        // notes in time order, for pruning
	head  int                  // first live index of order
}

type pendingKey struct {
	endpoint string
	key      uint64
}

type pendingNote struct {
	k     pendingKey
	until int64
}

// DefaultPendingTTL is how long a placement counts as held without the
// engine's events: twice the one-second event batching of
// llm-d-inference-sim, which is also more than vLLM takes to prefill and
// publish a long prompt on a loaded engine.
const DefaultPendingTTL = 2 * time.Second

// MaxPendingKeys bounds the notes kept, per table (one per rule, all its
// endpoints together): about 130 placements of 2,000-token prompts per
// second over the default TTL at block size 16, about 5 MiB. A prompt of
// more blocks than this is not held (its own first keys go first).
const MaxPendingKeys = 1 << 15

// NewPending returns an empty table whose notes count for ttl (≤ 0:
// DefaultPendingTTL).
func NewPending(ttl time.Duration) *Pending {
	if ttl <= 0 {
		ttl = DefaultPendingTTL
	}
	return &Pending{ttl: ttl, until: map[pendingKey]int64{}}
}

// TTL is how long a note counts.
func (p *Pending) TTL() time.Duration { return p.ttl }

// Note records that endpoint was sent a prompt whose full blocks have the
// chained keys keys, at now.
func (p *Pending) Note(endpoint string, keys []uint64, now time.Time) {
	if p == nil || len(keys) == 0 {
		return
	}
	n := now.UnixNano()
	until := n + int64(p.ttl)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prune(n)
	for _, key := range keys {
		k := pendingKey{endpoint, key}
		p.until[k] = until
		p.order = append(p.order, pendingNote{k, until})
	}
	for len(p.order)-p.head > MaxPendingKeys {
		p.forget(p.order[p.head])
		p.head++
	}
	p.compact()
}

// Held is how many of keys' leading blocks endpoint was sent within the
// TTL before now (0: none).
func (p *Pending) Held(endpoint string, keys []uint64, now time.Time) int {
	if p == nil || len(keys) == 0 {
		return 0
	}
	n := now.UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.until) == 0 || !p.live(endpoint, keys[0], n) {
		return 0
	}
	// keys[:lo] are held, keys[hi:] are not.
	lo, hi := 1, len(keys)
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if p.live(endpoint, keys[mid-1], n) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// Forget drops every note of endpoint: its engine lost what it held (a
// cleared cache, a restart, lost events). A cleared cache is reported
// with the engines' event delay, so a placement made between the loss and
// its report is forgotten too; it is then placed again like any miss,
// which is the behaviour without the table.
func (p *Pending) Forget(endpoint string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.until {
		if k.endpoint == endpoint {
			delete(p.until, k)
		}
	}
}

// Len is the number of keys noted and not yet pruned (for tests and
// the bound).
func (p *Pending) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.until)
}

func (p *Pending) live(endpoint string, key uint64, now int64) bool {
	u, ok := p.until[pendingKey{endpoint, key}]
	return ok && u > now
}

// prune forgets the notes that expired by now.
func (p *Pending) prune(now int64) {
	for p.head < len(p.order) && p.order[p.head].until <= now {
		p.forget(p.order[p.head])
		p.head++
	}
}

// forget drops note's key unless a later note refreshed it.
func (p *Pending) forget(note pendingNote) {
	if p.until[note.k] == note.until {
		delete(p.until, note.k)
	}
}

// compact moves the live notes to the front once the dead prefix is the
// larger part, so order does not grow with the notes ever made.
func (p *Pending) compact() {
	if p.head > 0 && p.head >= len(p.order)/2 {
		n := copy(p.order, p.order[p.head:])
		clear(p.order[n:])
		p.order = p.order[:n]
		p.head = 0
	}
}
