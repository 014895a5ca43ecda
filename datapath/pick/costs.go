package pick

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Costs is the cost model as every tier of one gateway applies it: the
// static priors (CostModel) plus what the gateway learns per endpoint while
// it runs. Two things the priors cannot know are kept here:
//
//   - The prefill backlog. An engine's running and waiting counts say how
//     many requests it holds, not how much prefill is still ahead of a
//     newcomer: one request computing 2,000 uncached tokens holds the
//     engine's prefill budget for half a second, one decoding holds almost
//     nothing. Every request the gateway places charges the prefill it
//     brings (Charge) to a per-endpoint clock that runs down in real time;
//     the unexpired part is the backlog term of the estimate. Without it
//     two requests that miss every cache, sent a few milliseconds apart,
//     look equally cheap on the same idle engine and queue one behind the
//     other, which is where a cache-aware router's tail comes from. How
//     much of the clock a newcomer really waits behind depends on how the
//     engine schedules prefills; it is learned per endpoint (backlog.go).
//   - The engine's actual speed. PerToken and PerRequest start at the
//     priors and follow observed times to first token (Observe), per
//     endpoint and pooled over the endpoints a rule compares, as
//     exponentially weighted averages: a slower GPU, a longer model or a
//     busier host is priced as it behaves, and identical engines are
//     priced alike (pooled.go).
//
// A Costs is safe for concurrent use; the per-endpoint state is created on
// first use and lives as long as the Costs (one per gateway process): a
// few dozen bytes per endpoint ID ever routed to, kept so an endpoint that
// leaves and returns keeps what was learned about it. Scoped views of it
// (Scoped) share that state and pool over one rule's endpoints.
type Costs struct {
	m    CostModel  // the priors, defaults filled
	pool *costPool  // the pooled learned costs of the endpoints this view compares
	eps  *endpoints // per-endpoint state, shared by every scoped view
	// members are the endpoints the pool is the median of (Scoped);
	// nil pools over every endpoint that has learned. Immutable.
	members []*endpointCost
}

// endpoints is the per-endpoint state by endpoint ID.
type endpoints struct {
	mu  sync.RWMutex
	eps map[string]*endpointCost
}

// LearnBound bounds learning: learned costs stay within this factor of
// the prior either way, so a burst of odd samples (a stalled host, a
// client that read slowly) cannot price an engine out, or in, for good.
const LearnBound = 2

// endpointCost is one endpoint's learned state. The clock and learned
// costs are nanoseconds in atomics: the request path reads them without a
// lock.
type endpointCost struct {
	busyUntil  atomic.Int64 // unix nanos at which the charged prefill is done
	perToken   learnedCost  // learned per-token prefill cost (ns)
	perRequest learnedCost  // learned per-queued-request wait (ns)
	samples    atomic.Int64 // observations folded in
	// backlogShare is the learned share of the charged backlog a newcomer
	// waits behind (float64 bits; backlog.go).
	backlogShare atomic.Uint64
	backlog      backlogFit // what the share is fitted from
	mu           sync.Mutex // serialises learning updates (read-modify-write of the learned costs)
}

// NewCosts returns the shared cost state for model m (zero fields take the
// defaults).
func NewCosts(m CostModel) *Costs {
	m = m.withDefaults()
	return &Costs{m: m, pool: newCostPool(m, 0), eps: &endpoints{eps: map[string]*endpointCost{}}}
}

// Model is the prior model (defaults filled).
func (s *Costs) Model() CostModel { return s.m }

func (s *Costs) endpoint(id string) *endpointCost {
	s.eps.mu.RLock()
	e := s.eps.eps[id]
	s.eps.mu.RUnlock()
	if e != nil {
		return e
	}
	s.eps.mu.Lock()
	defer s.eps.mu.Unlock()
	if e = s.eps.eps[id]; e == nil {
		e = &endpointCost{}
		e.perToken.init(s.m.PerToken)
		e.perRequest.init(s.m.PerRequest)
		e.backlogShare.Store(math.Float64bits(DefaultBacklogShare))
		e.backlog = newBacklogFit()
		s.eps.eps[id] = e
	}
	return e
}

// ModelFor is the model as it applies to endpoint id now: the priors with
// the per-token and per-request costs learned for it (pooledCost: s's
// pool, plus what the endpoint's own samples show beyond their noise).
func (s *Costs) ModelFor(id string) CostModel { return s.modelOf(s.endpoint(id)) }

// modelOf is ModelFor over an endpoint already looked up.
func (s *Costs) modelOf(e *endpointCost) CostModel {
	m := s.m
	n := e.samples.Load()
	m.PerToken = pooledCost(&e.perToken, &s.pool.tok, n, s.m.LearnRate)
	m.PerRequest = pooledCost(&e.perRequest, &s.pool.req, n, s.m.LearnRate)
	return m
}

// Estimate is one candidate's estimated time to first token, by term, as
// the routing explanation shows it.
type Estimate struct {
	Queue time.Duration // behind the engine's running batch and queue
	// Backlog is the wait the prefill this gateway sent that is not done
	// yet (Charged) adds: Charged × the endpoint's learned backlog share.
	Backlog    time.Duration
	Charged    time.Duration // the backlog clock's unexpired prefill
	Prefill    time.Duration // this request's own uncached prefill (with the start overhead), stretched by the running batch
	Saturation time.Duration // KV cache pressure
	// QueueUnits and Uncached are the inputs Observe learns from: the
	// queue in PerRequest units and the prompt tokens not cached.
	QueueUnits float64
	Uncached   int
	// Slowdown is the factor Prefill carries for the running batch
	// (CostModel.Slowdown; 0 in a hand-made estimate reads as 1).
	Slowdown float64
}

// Total is the estimate: the wait ahead (the larger of the queue and the
// backlog), the request's own prefill and the saturation penalty. The
// queue and the backlog are two views of the same wait — batch slots the
// engine must free, prefill compute it must do — and requests this gateway
// sent that still wait in the engine appear in both, so they are not
// added: summing them made every loaded holder look a queue too expensive
// under overload and scattered prompt groups.
func (e Estimate) Total() time.Duration { return max(e.Queue, e.Backlog) + e.Prefill + e.Saturation }

// Estimate prices candidate c at now for a prompt of tokens tokens of
// which cached are in c's cache: queue (QueueOf: the engine's counts when
// fresh, else in flight) + the prefill backlog this gateway charged to c +
// the uncached prefill, stretched by c's running batch + the KV saturation
// penalty.
func (s *Costs) Estimate(c *Candidate, now time.Time, tokens, cached int) Estimate {
	e := s.endpoint(c.ID)
	m := s.modelOf(e).withDefaults() // once for every term below
	q := QueueOf(c)
	uncached := max(tokens-min(cached, tokens), 0)
	slow := m.slowdown(q)
	est := Estimate{
		Queue:      m.queue(q),
		Prefill:    stretch(m.prefill(tokens, cached), slow),
		Saturation: m.saturation(c.Engine),
		QueueUnits: m.queueUnits(q),
		Uncached:   uncached,
		Slowdown:   slow,
	}
	if left := e.busyUntil.Load() - now.UnixNano(); left > 0 {
		est.Charged = time.Duration(left)
		est.Backlog = e.backlogWait(est.Charged)
	}
	return est
}

// Charge books the prefill of uncached tokens on endpoint id at now: the
// endpoint's backlog clock moves on by that prefill, starting from now if
// it had run down. Called once per request placed, by whichever tier
// placed it.
// It returns the clock after the charge: when the clock expects this
// prefill done (0 when nothing was charged).
func (s *Costs) Charge(id string, now time.Time, uncached int) int64 {
	if uncached <= 0 {
		return 0
	}
	e := s.endpoint(id)
	d := int64(s.modelOf(e).Prefill(uncached, 0))
	n := now.UnixNano()
	for {
		cur := e.busyUntil.Load()
		next := max(cur, n) + d
		if e.busyUntil.CompareAndSwap(cur, next) {
			return next
		}
	}
}

// release takes back the part of a charge the engine did not need: the
// prefill the clock expected done at end finished at now, so the clock
// (and every prefill booked behind it) moves earlier by end − now.
func (s *Costs) release(id string, end, now int64) {
	over := end - now
	if end == 0 || over <= 0 {
		return
	}
	e := s.endpoint(id)
	for {
		cur := e.busyUntil.Load()
		next := max(cur-over, now)
		if next >= cur || e.busyUntil.CompareAndSwap(cur, next) {
			return
		}
	}
}

// Observe folds one observed time to first token on endpoint id into its
// learned costs; est is the estimate the request was placed with. A
// request placed behind a charged backlog teaches the endpoint's backlog
// share (backlog.go) and nothing else. Only clean samples teach the
// per-token and per-request costs: placed with no backlog ahead (else the error is
// mostly the backlog model's, and learning from it fed back — an engine
// that answered sooner than a pessimistic backlog looked cheaper, drew
// more work, and looked cheaper still) and without saturation. The error
// between the observation and the estimate is shared between the prefill
// and the queue term in proportion to what each predicted, and each
// learned cost moves the model's LearnRate of the way to the value its
// share implies (an EWMA of per-token and per-request samples), bounded
// within LearnBound of the prior; then s's pool is recomputed (pooled.go:
// only s's, so another view holding the endpoint takes the sample in at
// its own next observation). Non-positive observations are ignored.
func (s *Costs) Observe(id string, est Estimate, ttft time.Duration) {
	rate := s.m.LearnRate
	// !(rate > 0), not rate <= 0: a NaN rate (--kv-cost-learn-rate=NaN
	// parses) disables learning instead of turning every learned cost
	// and the backlog share into NaN.
	if ttft <= 0 || !(rate > 0) || est.Saturation > 0 {
		return
	}
	if waited, ok := backlogWaited(est, ttft); ok {
		s.endpoint(id).learnBacklogShare(waited, est.Charged, rate)
		return
	}
	e := s.endpoint(id)
	e.mu.Lock()
	sa, sp, hasA, hasP, ok := s.m.learnStep(float64(e.perToken.mean.Load()), float64(e.perRequest.mean.Load()), est, ttft)
	if !ok {
		e.mu.Unlock()
		return // nothing learnable: a full hit on an idle engine
	}
	if hasA {
		e.perToken.fold(sa, rate, s.m.PerToken)
	}
	if hasP {
		e.perRequest.fold(sp, rate, s.m.PerRequest)
	}
	e.samples.Add(1)
	e.mu.Unlock()
	s.repool()
}

// Learned reports endpoint id's own learned costs (its samples alone, not
// the pooled price ModelFor gives it) and how many observations they fold
// in (the priors and 0 before any).
func (s *Costs) Learned(id string) (perToken, perRequest time.Duration, samples int64) {
	e := s.endpoint(id)
	return time.Duration(e.perToken.mean.Load()), time.Duration(e.perRequest.mean.Load()), e.samples.Load()
}

// Pooled reports the pooled learned costs of the endpoints s compares (the
// priors before any sample).
func (s *Costs) Pooled() (perToken, perRequest time.Duration) {
	return time.Duration(s.pool.tok.Load()), time.Duration(s.pool.req.Load())
}

func bounded(v, prior float64) float64 {
	return min(max(v, prior/LearnBound), prior*LearnBound)
}

// Priced is one candidate's estimate for the request being placed.
type Priced struct {
	ID string
	Estimate
}

// Price estimates every candidate for a prompt of tokens tokens (cached[i]
// held by cands[i]; nil: none cached), records the prices on f for the
// placement (Place) and later tiers, and returns them.
func (s *Costs) Price(f *Facts, cands []Candidate, tokens int, cached []int) []Priced {
	now := f.Clock()
	p := make([]Priced, len(cands))
	for i := range cands {
		h := 0
		if cached != nil {
			h = cached[i]
		}
		p[i] = Priced{ID: cands[i].ID, Estimate: s.Estimate(&cands[i], now, tokens, h)}
	}
	f.Priced, f.PromptTokens = p, tokens
	return p
}

// Place books a request's placement on chosen: its uncached prefill is
// charged to the endpoint's backlog, and f.Placed is set so the caller can
// report the first token (Placed.FirstToken) for learning. It reuses the
// price a tier recorded on f, else prices chosen alone (nothing cached).
func (s *Costs) Place(f *Facts, chosen Candidate) {
	now := f.Clock()
	est, found := Estimate{}, false
	for i := range f.Priced {
		if f.Priced[i].ID == chosen.ID {
			est, found = f.Priced[i].Estimate, true
			break
		}
	}
	if !found {
		est = s.Estimate(&chosen, now, f.PromptTokens, 0)
	}
	end := s.Charge(chosen.ID, now, est.Uncached)
	f.Placed = &Placed{costs: s, id: chosen.ID, est: est, at: now, end: end}
}

// Placed is a request's placement as the cost model priced it, kept until
// its first token arrives so the endpoint's costs can learn from it.
type Placed struct {
	costs *Costs
	id    string
	est   Estimate
	at    time.Time
	end   int64 // unix nanos the backlog clock expected the prefill done
	done  atomic.Bool
}

// FirstToken reports that the request's first token reached the gateway
// at now: its prefill is done (the rest of its charge is released) and
// the time is learned from. Only streamed answers should report it: a
// non-streamed body's first byte is its last (use Done).
func (p *Placed) FirstToken(now time.Time) {
	if p != nil && p.done.CompareAndSwap(false, true) {
		p.costs.release(p.id, p.end, now.UnixNano())
		p.costs.Observe(p.id, p.est, now.Sub(p.at))
	}
}

// Prefilled reports a P/D prefill leg that completed prefill after the
// request was placed: the prefill engine's own time to first token, so
// the rest of the charge is released and the time is learned from (as
// FirstToken). Non-positive durations release at now without learning.
func (p *Placed) Prefilled(prefill time.Duration) {
	if prefill <= 0 {
		p.Done(0)
		return
	}
	if p != nil && p.done.CompareAndSwap(false, true) {
		at := p.at.Add(prefill)
		p.costs.release(p.id, p.end, at.UnixNano())
		p.costs.Observe(p.id, p.est, prefill)
	}
}

// Done reports that the request's prefill finished prefill after it was
// placed (0: by now), without learning from it: the rest of its charge is
// released. Safe on nil and after FirstToken.
func (p *Placed) Done(prefill time.Duration) {
	if p == nil || !p.done.CompareAndSwap(false, true) {
		return
	}
	at := time.Now()
	if prefill > 0 {
		at = p.at.Add(prefill)
	}
	p.costs.release(p.id, p.end, at.UnixNano())
}

// CheapestRotating returns the index of the least placement cost among
// prices (one per candidate, not empty; Estimate.Total); exact
// ties rotate through cursor, or go to key's rendezvous winner among them
// when key is not 0, so idle engines share cold work instead of the first
// one taking all of it.
func CheapestRotating(prices []Priced, cands []Candidate, key uint64, cursor *atomic.Uint64) int {
	return leastOf(cands, func(i int) time.Duration { return prices[i].Total() }, key, cursor)
}
