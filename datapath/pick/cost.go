package pick

import (
	"math"
	"time"
)

// Cost estimate. A cache-aware choice trades two waits against each other:
// the prefill a candidate would skip because it already holds part of the
// prompt, and the queue in front of the request on that candidate. A fixed
// in-flight gap (LoadGuardTrips) cannot weigh them — it throws a 2,000-token
// hit away for one extra decoding request, and its fallback (the least
// loaded endpoint) differs every time, scattering a prompt group's cache.
// CostModel puts both in one unit, the estimated time to first token, so
// the picker takes the candidate with the least of it: a large hit survives
// a little load, while a hit on an engine with a real queue still loses to
// an idle cold one.
//
// The estimate of candidate c for a prompt of P tokens of which c holds H:
//
//	queue(c)   = Running × PerRequest / Window + Waiting × PerRequest
//	prefill(c) = (Overhead + (P − H) × PerToken) × (1 + BatchSlowdown × Running / Window)
//	estimate   = queue(c) + prefill(c)
//
// Costs adds the per-endpoint terms only a running gateway knows (the
// prefill backlog it sent, learned costs) and the KV saturation penalty.
//
// Running and Waiting are the engine's own counts when it reports them
// freshly (QueueState.EngineValid), else they are derived from the
// gateway's in-flight count: the first Window requests run in the engine's
// batch, the rest wait. A running request costs a newcomer a share of each
// step (PerRequest/Window); a waiting one holds it back by about the time a
// batch slot takes to free (PerRequest). The running batch also slows the
// request's own prefill: every step of it is shared with the running
// sequences, so a long prefill beside a full batch takes up to
// 1 + BatchSlowdown times as long (llm-d-inference-sim and test/enginesim
// both model this as their time factor under load). That term grows with
// the prompt, which the queue term does not: a cold 1,700-token prompt
// beside 15 running requests waits about 0.4 s more than beside 3, while a
// follow-up turn that hits its cache barely notices the batch.

// Defaults of CostModel: priors from the engine profile the simulator
// models (llm-d-inference-sim's "8B on H100, balanced", test/enginesim's
// DefaultOptions: 30 ms per prefill, 250 µs per prompt token, max-num-seqs
// 16) and its slot turnover (12 ms per output token, twice that at a full
// batch: a 100-token answer decodes in 1.2–2.4 s, so with 16 slots one
// frees every 75–150 ms). Real engines differ; the knobs are flags.
const (
	DefaultCostPerToken   = 250 * time.Microsecond
	DefaultCostOverhead   = 30 * time.Millisecond
	DefaultCostPerRequest = 100 * time.Millisecond
	DefaultCostWindow     = 16
	// DefaultCostSaturation is the penalty of a full KV cache: about the
	// prefill of a 4,000-token prompt, so a nearly full engine keeps a long
	// cache hit but loses short and cold requests to engines with room.
	DefaultCostSaturation = time.Second
	// DefaultCostBatchSlowdown is the prefill slowdown beside a full batch:
	// the profile's time factor 2.0 under full load, less one.
	DefaultCostBatchSlowdown = 1.0
	// DefaultCostLearnRate weighs each observation a tenth: an endpoint's
	// costs follow a change over a few dozen requests.
	DefaultCostLearnRate = 0.1
)

// CostModel estimates a request's wait for its first token on a candidate.
// The zero value is usable: zero fields take the defaults.
type CostModel struct {
	PerToken   time.Duration `yaml:"kv-cost-per-token"`   // prefill time per uncached prompt token
	Overhead   time.Duration `yaml:"kv-cost-overhead"`    // fixed cost of starting a prefill
	PerRequest time.Duration `yaml:"kv-cost-per-request"` // wait behind one queued request
	Window     int           `yaml:"kv-cost-window"`      // requests an engine runs at once (its batch)
	Saturation time.Duration `yaml:"kv-cost-saturation"`  // penalty of a full KV cache (none up to SaturationFrom in use)
	// BatchSlowdown is how much longer a prefill takes beside a full
	// running batch than on an idle engine (0.5: half again as long),
	// linear in the batch in between; negative: none.
	BatchSlowdown float64 `yaml:"kv-cost-batch-slowdown"`
	// LearnRate is how far one observed time to first token moves an
	// endpoint's learned per-token and per-request costs toward what it
	// implies (Costs.Observe), and the discount of older samples in its
	// learned backlog share (backlog.go); negative disables both.
	LearnRate float64 `yaml:"kv-cost-learn-rate"`
}

// DefaultCostModel returns the model with the default priors.
func DefaultCostModel() CostModel {
	return CostModel{PerToken: DefaultCostPerToken, Overhead: DefaultCostOverhead,
		PerRequest: DefaultCostPerRequest, Window: DefaultCostWindow, Saturation: DefaultCostSaturation,
		BatchSlowdown: DefaultCostBatchSlowdown, LearnRate: DefaultCostLearnRate}
}

// withDefaults fills zero fields. It is idempotent: a negative Overhead,
// Saturation, BatchSlowdown or LearnRate ("none") stays negative, and the terms read it
// as zero, so a filled model can be filled again (every exported method fills its
// receiver) without "none" turning into the default.
func (m CostModel) withDefaults() CostModel {
	d := DefaultCostModel()
	if m.PerToken <= 0 {
		m.PerToken = d.PerToken
	}
	if m.Overhead == 0 {
		m.Overhead = d.Overhead
	}
	if m.PerRequest <= 0 {
		m.PerRequest = d.PerRequest
	}
	if m.Window <= 0 {
		m.Window = d.Window
	}
	if m.Saturation == 0 {
		m.Saturation = d.Saturation
	}
	if m.BatchSlowdown == 0 {
		m.BatchSlowdown = d.BatchSlowdown
	}
	if m.LearnRate == 0 {
		m.LearnRate = d.LearnRate
	}
	m.LearnRate = min(m.LearnRate, 1)
	return m
}

// QueueState is a candidate's queue as the estimate sees it: the gateway's
// own in-flight count, and the engine's reported running and waiting
// requests when EngineValid (a fresh scrape of an engine that exports them).
type QueueState struct {
	InFlight         int
	EngineValid      bool
	Running, Waiting int
}

// QueueOf is the queue the estimate reads for c: its in-flight snapshot
// (Load) and, when the engine's own counts are fresh (Engine.Valid), its
// running batch and queue. It is the one place engine-reported signals
// plug in, so every cost-based picker sees them.
func QueueOf(c *Candidate) QueueState {
	q := QueueState{InFlight: c.Load}
	if e := c.Engine; e.Valid {
		q.EngineValid, q.Running, q.Waiting = true, max(e.Running, 0), max(e.Waiting, 0)
	}
	return q
}

// Queue is the queue term of the estimate.
func (m CostModel) Queue(q QueueState) time.Duration { return m.withDefaults().queue(q) }

// queue is Queue of a filled model (withDefaults): the terms below are
// each filled once per estimate, not once per term.
func (m CostModel) queue(q QueueState) time.Duration {
	running, waiting := m.split(q)
	return time.Duration(running)*m.PerRequest/time.Duration(m.Window) + time.Duration(waiting)*m.PerRequest
}

// queueUnits is the queue term in PerRequest units (what learning scales).
// m is filled (withDefaults).
func (m CostModel) queueUnits(q QueueState) float64 {
	running, waiting := m.split(q)
	return float64(running)/float64(m.Window) + float64(waiting)
}

// split is the running batch and the queue the estimate assumes for q.
func (m CostModel) split(q QueueState) (running, waiting int) {
	running, waiting = min(max(q.InFlight, 0), m.Window), max(q.InFlight-m.Window, 0)
	if q.EngineValid {
		running, waiting = q.Running, q.Waiting
		// A scrape is up to an interval old and cannot see what this
		// gateway sent since; the engine holds at least this gateway's
		// requests in flight, so the difference joins its batch while the
		// engine has room (no queue, under the window) and its queue after.
		if extra := q.InFlight - (q.Running + q.Waiting); extra > 0 {
			if waiting == 0 {
				room := max(m.Window-running, 0)
				running += min(extra, room)
				extra -= min(extra, room)
			}
			waiting += extra
		}
	}
	return running, waiting
}

// SaturationFrom is the KV cache usage above which the saturation penalty
// starts: below it an engine admits new sequences freely; above it a new
// request's blocks may not fit, so it waits for others to finish or forces
// preemption (vLLM recomputes preempted sequences).
const SaturationFrom = 0.8

// SaturationPenalty is the KV pressure term: 0 up to SaturationFrom of the
// engine's cache in use (by running requests; cached-but-free blocks do not
// count), rising linearly to Saturation at a full cache. Engines that do
// not report usage, or whose scrape is stale, pay none.
func (m CostModel) SaturationPenalty(e EngineLoad) time.Duration {
	return m.withDefaults().saturation(e)
}

// saturation is SaturationPenalty of a filled model.
func (m CostModel) saturation(e EngineLoad) time.Duration {
	if !e.Valid || e.KVUsage <= SaturationFrom || m.Saturation < 0 {
		return 0
	}
	f := min((e.KVUsage-SaturationFrom)/(1-SaturationFrom), 1)
	return time.Duration(math.Round(f * float64(max(m.Saturation, 0))))
}

// Prefill is the prefill term for a prompt of tokens tokens of which
// cached are already in the candidate's cache (clamped to the prompt).
func (m CostModel) Prefill(tokens, cached int) time.Duration {
	return m.withDefaults().prefill(tokens, cached)
}

// prefill is Prefill of a filled model.
func (m CostModel) prefill(tokens, cached int) time.Duration {
	return max(m.Overhead, 0) + time.Duration(max(tokens-min(cached, tokens), 0))*m.PerToken
}

// Slowdown is the factor the running batch of q stretches a prefill by:
// 1 + BatchSlowdown × running / Window, the running batch capped at the
// window (NaN or negative BatchSlowdown: 1).
func (m CostModel) Slowdown(q QueueState) float64 { return m.withDefaults().slowdown(q) }

// slowdown is Slowdown of a filled model.
func (m CostModel) slowdown(q QueueState) float64 {
	running, _ := m.split(q)
	if !(m.BatchSlowdown > 0) {
		return 1
	}
	return 1 + m.BatchSlowdown*float64(min(running, m.Window))/float64(m.Window)
}

// stretch is d × f, rounded.
func stretch(d time.Duration, f float64) time.Duration {
	return time.Duration(math.Round(float64(d) * f))
}

// Estimate is the estimated time to first token on a candidate with queue
// q holding cached of the prompt's tokens.
func (m CostModel) Estimate(q QueueState, tokens, cached int) time.Duration {
	m = m.withDefaults()
	return m.queue(q) + stretch(m.prefill(tokens, cached), m.slowdown(q))
}

// Cheapest returns the index of the least estimate in est (not empty); ties
// go to the higher cached, then the lower load, then the earlier index, so
// the choice is stable across requests of one prompt group.
func Cheapest(est []time.Duration, cached []int, cands []Candidate) int {
	best := 0
	for i := 1; i < len(est); i++ {
		switch {
		case est[i] < est[best]:
			best = i
		case est[i] > est[best]:
		case cached[i] > cached[best]:
			best = i
		case cached[i] == cached[best] && cands[i].Load < cands[best].Load:
			best = i
		}
	}
	return best
}
