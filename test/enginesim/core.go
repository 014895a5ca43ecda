package enginesim

import (
	"errors"
	"fmt"
	"time"

	"github.com/infergate/infergate/kvexact"
)

// ErrTooLong refuses a prompt that could never fit the KV cache.
var ErrTooLong = errors.New("enginesim: prompt and output exceed the KV cache")

// Request is one sequence to serve.
type Request struct {
	Tokens    []uint32
	MaxTokens int
	// RemotePrefill marks a decode leg whose prompt KV comes from a
	// prefill engine: the blocks this engine lacks are transferred
	// (TransferPerToken each) instead of computed.
	RemotePrefill bool
}

// Event is what a request sees: one generated token (Index from 0), or the
// end (Done, with Err when it was refused).
type Event struct {
	Index int
	Done  bool
	Err   error
	At    time.Duration // virtual time
}

// Seq is a request inside the Core.
type Seq struct {
	req     Request
	hashes  []uint64 // engine hashes of the prompt's full blocks
	events  chan Event
	arrived time.Duration

	admitted  bool
	cached    int // prompt tokens found in the cache at admission
	computed  int // prompt tokens present (cached, computed or transferred)
	started   bool
	readyAt   time.Duration
	held      int // prompt blocks [0, held) referenced in the cache
	private   int
	generated int
	first     time.Duration
	done      bool
}

// Events is the request's event stream, closed after Done. It is buffered
// for the whole request, so the Core never blocks on a slow reader.
func (s *Seq) Events() <-chan Event { return s.events }

// CachedTokens is how much of the prompt was a prefix-cache hit (valid
// once the first token arrived).
func (s *Seq) CachedTokens() int { return s.cached }

// PromptTokens is the prompt length.
func (s *Seq) PromptTokens() int { return len(s.req.Tokens) }

// Stats are the engine's cumulative counters and current gauges.
type Stats struct {
	Running, Waiting   int
	KVUsage            float64
	PrefixQueries      uint64 // prompt tokens looked up
	PrefixHits         uint64 // of which cached
	PromptTokens       uint64
	GenerationTokens   uint64
	Finished, Refused  uint64
	TransferredTokens  uint64
	ComputedTokens     uint64 // prompt tokens prefilled here (not cached, not transferred)
	Steps              uint64
	PrefillComputeTime time.Duration // Σ modelled prefill cost
}

// Core is one engine's scheduler and cache in virtual time. Callers
// serialise access (the Engine holds a mutex); it never sleeps.
type Core struct {
	opts    Options
	hasher  *kvexact.VLLMHasher
	cache   *kvCache
	waiting []*Seq
	running []*Seq
	stats   Stats
	ttft    []time.Duration // first-token latencies not yet drained
	plan    plan
}

type plan struct {
	at      time.Duration
	dur     time.Duration
	decodes []*Seq
	chunks  []chunk
	active  bool
}

type chunk struct {
	seq    *Seq
	tokens int
}

// NewCore builds a Core with an empty cache.
func NewCore(o Options) (*Core, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	seed := o.HashSeed
	h, err := kvexact.NewVLLMHasher(o.HashAlgo, &seed)
	if err != nil {
		return nil, fmt.Errorf("enginesim: block hasher: %w", err)
	}
	return &Core{opts: o, hasher: h, cache: newKVCache(o.KVBlocks, o.BlockSize)}, nil
}

// BlockHashes returns the engine hashes of tokens' full blocks, as
// published in BlockStored.
func (c *Core) BlockHashes(tokens []uint32) []uint64 { return c.hasher.Keys(tokens, c.opts.BlockSize) }

// Add queues a request at virtual time now.
func (c *Core) Add(r Request, now time.Duration) *Seq {
	if r.MaxTokens < 1 {
		r.MaxTokens = 1
	}
	s := &Seq{req: r, hashes: c.BlockHashes(r.Tokens), events: make(chan Event, r.MaxTokens+1), arrived: now}
	c.waiting = append(c.waiting, s)
	return s
}

// Cancel removes a request (client gone), releasing what it holds.
func (c *Core) Cancel(s *Seq) {
	if s.done {
		return
	}
	if !s.admitted {
		for i, w := range c.waiting {
			if w == s {
				c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
				break
			}
		}
		s.done = true
		close(s.events)
		return
	}
	c.finish(s, nil, 0)
}

// blocksFor is the number of KV blocks a request needs in all.
func (c *Core) blocksFor(s *Seq) int {
	bs := c.opts.BlockSize
	return (len(s.req.Tokens) + s.req.MaxTokens + bs - 1) / bs
}

// admit moves waiting requests to running, FIFO, while there is room in
// MaxNumSeqs and in the cache. A head request that waits blocks the rest,
// as in vLLM's FCFS scheduler.
func (c *Core) admit(now time.Duration) {
	for len(c.waiting) > 0 && len(c.running) < c.opts.MaxNumSeqs {
		s := c.waiting[0]
		n := len(s.req.Tokens)
		maxHit := 0
		if n > 0 {
			// vLLM always computes the last prompt token (it needs its
			// logits), so a fully cached prompt recomputes its last block.
			maxHit = min((n-1)/c.opts.BlockSize, len(s.hashes))
		}
		hit := c.cache.match(s.hashes[:maxHit])
		need := c.blocksFor(s) - hit
		if need > c.opts.KVBlocks {
			c.waiting = c.waiting[1:]
			s.admitted = true
			c.stats.Refused++
			s.done = true
			s.events <- Event{Done: true, Err: ErrTooLong, At: now}
			close(s.events)
			continue
		}
		if c.cache.available(s.hashes[:hit]) < need {
			return
		}
		c.waiting = c.waiting[1:]
		c.cache.acquire(s.hashes[:hit])
		c.cache.reserve(need)
		s.admitted, s.held, s.private = true, hit, need
		s.cached = hit * c.opts.BlockSize
		s.computed = s.cached
		c.stats.PrefixQueries += uint64(n)
		c.stats.PrefixHits += uint64(s.cached)
		c.stats.PromptTokens += uint64(n)
		if s.req.RemotePrefill {
			// The prefill computed the rest; pulling it takes time but no
			// step, and the blocks are this engine's once pulled.
			pull := n - s.computed
			c.stats.TransferredTokens += uint64(pull)
			s.readyAt = now + time.Duration(pull)*c.opts.TransferPerToken
			s.started = true
			c.completePrompt(s, n)
		}
		c.running = append(c.running, s)
	}
}

// completePrompt records that the prompt is present up to computed tokens
// and caches its newly full blocks.
func (c *Core) completePrompt(s *Seq, computed int) {
	s.computed = computed
	full := min(computed/c.opts.BlockSize, len(s.hashes))
	if full > s.held {
		c.cache.store(s.hashes, s.held, full, s.req.Tokens)
		s.private -= full - s.held
		s.held = full
	}
}

// Plan admits what fits and plans the next step at virtual time now. It
// returns the step's duration and false when the engine is idle. A step
// that only waits for KV transfers lasts until the first one lands.
func (c *Core) Plan(now time.Duration) (time.Duration, bool) {
	c.admit(now)
	p := plan{at: now}
	for _, s := range c.running {
		if s.computed == len(s.req.Tokens) && s.readyAt <= now {
			p.decodes = append(p.decodes, s)
		}
	}
	budget := c.opts.MaxBatchedTokens - len(p.decodes)
	var prefill time.Duration
	for _, s := range c.running {
		rest := len(s.req.Tokens) - s.computed
		if rest <= 0 || budget <= 0 {
			continue
		}
		n := min(rest, budget)
		budget -= n
		if !s.started {
			prefill += c.opts.PrefillOverhead
		}
		prefill += time.Duration(n) * c.opts.PrefillPerToken
		p.chunks = append(p.chunks, chunk{s, n})
	}
	var decode time.Duration
	if len(p.decodes) > 0 {
		f := 1.0
		if c.opts.MaxNumSeqs > 1 {
			f += (c.opts.LoadFactor - 1) * float64(min(len(c.running), c.opts.MaxNumSeqs)-1) / float64(c.opts.MaxNumSeqs-1)
		}
		decode = time.Duration(float64(c.opts.DecodeStep) * f)
	}
	p.dur = prefill + decode
	if p.dur == 0 {
		// Nothing computable: wait for the earliest transfer, or idle.
		var next time.Duration
		for _, s := range c.running {
			if s.readyAt > now && (next == 0 || s.readyAt < next) {
				next = s.readyAt
			}
		}
		if next == 0 {
			c.plan = plan{}
			return 0, false
		}
		p.dur = next - now
	}
	p.active = true
	c.stats.PrefillComputeTime += prefill
	c.plan = p
	return p.dur, true
}

// Complete applies the planned step at virtual time now (normally the
// plan's start plus its duration): prefill chunks advance and cache their
// full blocks, finished prefills and every decode emit one token, and
// requests that reached MaxTokens finish.
func (c *Core) Complete(now time.Duration) {
	p := c.plan
	c.plan = plan{}
	if !p.active {
		return
	}
	c.stats.Steps++
	for _, ch := range p.chunks {
		s := ch.seq
		if s.done {
			continue
		}
		s.started = true
		c.stats.ComputedTokens += uint64(ch.tokens)
		c.completePrompt(s, s.computed+ch.tokens)
		if s.computed == len(s.req.Tokens) {
			c.emit(s, now)
		}
	}
	for _, s := range p.decodes {
		if !s.done {
			c.emit(s, now)
		}
	}
}

// emit produces the request's next token and finishes it at MaxTokens.
func (c *Core) emit(s *Seq, now time.Duration) {
	if s.generated == 0 {
		s.first = now
		c.ttft = append(c.ttft, now-s.arrived)
	}
	s.events <- Event{Index: s.generated, At: now}
	s.generated++
	c.stats.GenerationTokens++
	if s.generated >= s.req.MaxTokens {
		c.finish(s, nil, now)
		c.stats.Finished++
	}
}

func (c *Core) finish(s *Seq, err error, now time.Duration) {
	for i, r := range c.running {
		if r == s {
			c.running = append(c.running[:i], c.running[i+1:]...)
			break
		}
	}
	c.cache.release(s.hashes[:s.held], s.private)
	s.held, s.private = 0, 0
	s.done = true
	s.events <- Event{Done: true, Err: err, At: now}
	close(s.events)
}

// ResetPrefixCache empties the cache of unreferenced blocks; false while
// requests hold blocks.
func (c *Core) ResetPrefixCache() bool { return c.cache.reset() }

// DrainEvents returns the KV events queued since the last call.
func (c *Core) DrainEvents() []any { return c.cache.drain() }

// Stats returns the counters and gauges.
func (c *Core) Stats() Stats {
	st := c.stats
	st.Running, st.Waiting = len(c.running), len(c.waiting)
	st.KVUsage = float64(c.cache.used()) / float64(c.opts.KVBlocks)
	return st
}

// DrainTTFT returns the time to first token (arrival to first token, in
// virtual time) of the requests that got one since the last call.
func (c *Core) DrainTTFT() []time.Duration {
	t := c.ttft
	c.ttft = nil
	return t
}

// Cached reports whether the cache holds a block hash.
func (c *Core) Cached(h uint64) bool { return c.cache.cached(h) }
