package ladder

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/datapath/pick"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/tokenize"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// Fall-through reasons of Tier 1.5 beyond the shared ones (ReasonMiss: no
// trusted candidate holds block 0; ReasonUntrusted: no candidate's inventory
// is trusted; ReasonLoadGuard: every holder is too loaded).
const (
	ReasonTokenize    = "tokenize_failed" // engine /tokenize failed or timed out
	ReasonNoPrompt    = "no_prompt"       // no prompt/messages, or an unsupported shape
	ReasonShortPrompt = "short_prompt"    // fewer tokens than one block
)

// KVIndex is the inventory surface Tier 1.5 reads; *kvexact.Inventory
// implements it.
type KVIndex interface {
	// AppendRequestKeys appends a prompt's block keys to dst, so the tier
	// reuses one buffer per decision in flight instead of allocating the
	// keys of every prompt.
	AppendRequestKeys(dst []uint64, tokens []uint32) []uint64
	Score(blockKeys []uint64, candidates []string) []kvexact.Score
	Trusted(endpoint string) (bool, string)
	// TrustedMask is Trusted for every candidate of one decision at once
	// (bit i: endpoints[i], the first 64), so a pick takes the index's
	// locks and reads the clock once instead of once per candidate.
	TrustedMask(endpoints []string) uint64
}

// DefaultCPUWeight weighs a CPU-tier (offloaded) block against a GPU one:
// it must be copied back before reuse (llm-d uses 0.8).
const DefaultCPUWeight = 0.8

// KVExactOptions configures Tier 1.5 for one rule.
type KVExactOptions struct {
	Rule      string
	Index     KVIndex
	Tokenizer tokenize.Tokenizer // nil: only client-given token ids are scored
	// CPUWeight is the weight of a CPU-tier block (GPU = 1).
	CPUWeight float64
	// LoadGuard skips a winner whose load exceeds the least loaded
	// candidate's by more than this (pd_balance_abs_threshold for P/D);
	// negative disables the guard.
	LoadGuard int
	// Cost, when set, replaces the load guard: every candidate's time to
	// first token is estimated from its queue and the prefill of the
	// tokens it does not hold (pick.CostModel), and the least estimate
	// wins, holder or not. nil (and Costs nil) keeps the in-flight
	// LoadGuard. Only NewKVExact reads it, to build Costs.
	Cost *pick.CostModel
	// Costs is the gateway's shared cost state (backlog, learned costs);
	// nil with Cost set: the tier keeps its own, built from Cost.
	Costs *pick.Costs
	// Pending counts the blocks a placement just sent an endpoint as held
	// by it until the engine's own events arrive (kvexact.Pending): the
	// tier notes every placement that should make the engine store blocks
	// (Observe) and scores a noted prefix like a published one. nil: only
	// published blocks count.
	Pending  *kvexact.Pending
	Watchdog *Watchdog // nil: no zero-hit watchdog
	Metrics  *metrics.KVRouting
	Logger   logrus.FieldLogger
}

// KVExact is Tier 1.5: route to the candidate whose engine already holds the
// longest prefix of the request's KV blocks, as reported by the engines' own
// KV events. It never fails a request: every problem is a fall-through.
type KVExact struct {
	o       KVExactOptions
	hits    prometheus.Counter // nil without metrics
	scratch sync.Pool          // *decideScratch, one per decision in flight
}

// decideScratch is a decision's reused buffers: the prompt's block keys and
// the candidates' IDs. Both go to the index through its interface, so on
// the stack they would escape to the heap on every decision.
type decideScratch struct {
	keys  []uint64
	names []string
}

// requestKeys returns the block keys of ids in one of the tier's reused
// buffers, to be put back (putScratch) once the decision no longer reads
// the keys or the names.
func (t *KVExact) requestKeys(ids []uint32) ([]uint64, *decideScratch) {
	s, _ := t.scratch.Get().(*decideScratch)
	if s == nil {
		s = new(decideScratch)
	}
	s.keys = t.o.Index.AppendRequestKeys(s.keys[:0], ids)
	return s.keys, s
}

// putScratch returns s to the pool, letting go of the names it held.
func (t *KVExact) putScratch(s *decideScratch) {
	clear(s.names)
	s.names = s.names[:0]
	t.scratch.Put(s)
}

// NewKVExact builds the tier.
func NewKVExact(o KVExactOptions) *KVExact {
	if o.CPUWeight <= 0 {
		o.CPUWeight = DefaultCPUWeight
	}
	if o.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.Logger = l
	}
	if o.Costs == nil && o.Cost != nil {
		o.Costs = pick.NewCosts(*o.Cost)
	}
	t := &KVExact{o: o}
	if o.Metrics != nil {
		t.hits = o.Metrics.Tier15Hits.WithLabelValues(o.Rule)
	}
	return t
}

// Name implements PrefillTier.
func (t *KVExact) Name() pick.Name { return TierKVExact }

// Costs is the tier's cost state (nil: the in-flight load guard).
func (t *KVExact) Costs() *pick.Costs { return t.o.Costs }

// workNoter is an index that wants to know where requests went, so an
// endpoint whose events stopped while it kept receiving work stops being
// trusted (kvexact.Inventory.NoteWork).
type workNoter interface{ NoteWork(endpoint string) }

// Observe implements Observer: the prefill finally chosen, by any tier,
// is noted on the index when the request should make it publish
// (ExpectsNewBlocks). An engine serving only full prefix hits stores no
// block and publishes nothing; counting that as work would untrust the
// hottest holder after --kv-stale-after.
//
// The same placements are noted as pending on the chosen endpoint
// (KVExactOptions.Pending) unless a note already covers the whole prompt:
// a note counts from the first placement of a prompt, so a holder that
// never publishes stops counting after one TTL however often it is chosen.
func (t *KVExact) Observe(f *Facts, chosen Candidate) {
	if f == nil || f.KVHeld == nil {
		return // the tier did not score this request: nothing is known
	}
	held := 0
	for _, s := range f.KVHeld {
		if s.Endpoint == chosen.ID {
			held = s.Blocks
			break
		}
	}
	if !ExpectsNewBlocks(f.KVBlocks, held) {
		return
	}
	if w, ok := t.o.Index.(workNoter); ok {
		w.NoteWork(chosen.ID)
	}
	if t.o.Pending != nil && f.Tokens != nil {
		keys, sc := t.requestKeys(f.Tokens)
		if now := f.Clock(); t.o.Pending.Held(chosen.ID, keys, now) < len(keys) {
			t.o.Pending.Note(chosen.ID, keys, now)
		}
		t.putScratch(sc)
	}
}

// ExpectsNewBlocks is the stale-feed guard's rule: a request of blocks
// full prompt blocks sent to an endpoint already holding the first held
// of them makes the engine store (and publish BlockStored for) the rest —
// a miss or a partial hit. A full hit stores nothing, so its silence says
// nothing about the feed.
func ExpectsNewBlocks(blocks, held int) bool { return blocks > held }

// Pick implements PrefillTier.
func (t *KVExact) Pick(f *Facts, cands []Candidate) (int, string, bool) {
	idx, reason, ok, _ := t.decide(f, cands, false)
	t.record(reason, ok)
	if ok && t.o.Metrics != nil && f.KVPending {
		t.o.Metrics.Tier15Pending.WithLabelValues(t.o.Rule).Inc()
	}
	return idx, reason, ok
}

// Explain runs the decision without counting it and returns every
// candidate's score with the outcome.
func (t *KVExact) Explain(f *Facts, cands []Candidate) (idx int, reason string, ok bool, scores []spec.CandidateScore) {
	return t.decide(f, cands, true)
}

// DryPick is Pick without side effects (no metrics, no watchdog), for a
// ladder dry run; same contract as PrefixTier.DryPick.
func (t *KVExact) DryPick(f *Facts, cands []Candidate) (int, string, bool) {
	idx, reason, ok, _ := t.decide(f, cands, true)
	return idx, reason, ok
}

func (t *KVExact) record(reason string, ok bool) {
	switch {
	case t.o.Metrics == nil:
	case ok:
		t.hits.Inc()
	default:
		t.o.Metrics.Tier15Misses.WithLabelValues(t.o.Rule, reason).Inc()
	}
}

// tokens returns the request's token ids: the ones already known, else the
// tokenizer's, kept in f.Tokens so a ladder re-run (a pair refused, a
// breaker that did not admit) does not tokenise again and the datapath
// knows the prompt's exact length (its context-length check).
func (t *KVExact) tokens(f *Facts) ([]uint32, string) {
	if f.Tokens != nil {
		return f.Tokens, ""
	}
	if t.o.Tokenizer == nil {
		return nil, ReasonNoPrompt
	}
	ctx := f.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	req := tokenize.Request{Model: f.Model, Path: f.Path, Body: f.Body}
	if f.Model != "" {
		// One scan for the prompt field instead of a JSON decode of the
		// whole body (the same scanner Tier 1 uses), none when the caller
		// scanned the body already.
		prompt, messages := f.Prompt, f.Messages
		if !f.BodyScanned {
			b := ScanBody(f.Body)
			prompt, messages = b.Prompt, b.Messages
		}
		if strings.HasSuffix(f.Path, chatPathSuffix) {
			prompt = nil
		} else if f.Path != "" {
			messages = nil
		}
		req.Prompt, req.Messages = prompt, messages
	}
	ids, err := t.o.Tokenizer.Tokens(ctx, req)
	switch {
	case errors.Is(err, tokenize.ErrNoPrompt), errors.Is(err, tokenize.ErrUnsupported):
		return nil, ReasonNoPrompt
	case err != nil:
		return nil, ReasonTokenize
	}
	f.Tokens = ids
	return ids, ""
}

// decide is the whole tier. Candidates score by consecutive blocks from
// block 0 (GPU blocks 1, CPU blocks CPUWeight); untrusted inventories score
// 0. Without a cost model the best wins, ties to the lower load then the
// earlier candidate, and a holder more loaded than the least loaded by more
// than LoadGuard is passed over for the next best holder. With one, once
// any trusted candidate holds a block, the candidate with the least
// estimated wait wins (costPick).
func (t *KVExact) decide(f *Facts, cands []Candidate, explain bool) (int, string, bool, []spec.CandidateScore) {
	if t.o.Index == nil {
		return -1, ReasonEmpty, false, nil
	}
	ids, reason := t.tokens(f)
	if reason != "" {
		return -1, reason, false, nil
	}
	keys, sc := t.requestKeys(ids)
	// Nothing keeps the keys or the names past the decision: Score and
	// TrustedMask read them, f keeps only the keys' count.
	defer t.putScratch(sc)
	if len(keys) == 0 {
		return -1, ReasonShortPrompt, false, nil
	}
	var wBuf [16]float64
	var pBuf [16]int
	names, ws, pend := sc.names[:0], wBuf[:0], pBuf[:0]
	minLoad := cands[0].Load
	for i := range cands {
		c := &cands[i]
		names = append(names, c.ID)
		ws = append(ws, 0)
		minLoad = min(minLoad, c.Load)
	}
	sc.names = names
	var scores []spec.CandidateScore
	if explain {
		scores = make([]spec.CandidateScore, len(cands))
	}
	best, anyTrusted, anyHit, guarded := -1, false, false, false
	bestW := 0.0
	raw := t.o.Index.Score(keys, names)
	if !explain {
		f.KVBlocks, f.KVHeld = len(keys), raw
	}
	var trust uint64
	if !explain {
		trust = t.o.Index.TrustedMask(names)
	}
	var now time.Time // read only when there is a pending table to ask
	if t.o.Pending != nil {
		now = f.Clock()
	}
	for i, s := range raw {
		var trusted bool
		var why string
		if explain || i >= 64 { // the reason is only shown when explaining
			trusted, why = t.o.Index.Trusted(cands[i].ID)
		} else {
			trusted = trust&(1<<i) != 0
		}
		anyTrusted = anyTrusted || trusted
		w, pending := 0.0, 0
		if trusted && t.o.Pending != nil {
			pending = t.o.Pending.Held(cands[i].ID, keys, now)
		}
		pend = append(pend, pending)
		if trusted && (s.Blocks > 0 || pending > 0) {
			// A block just sent counts as a GPU block: the engine is
			// computing it, and its event is on the way.
			w = max(s.Weighted(t.o.CPUWeight), float64(pending))
			anyHit = true
			ws[i] = w
			// The load guard keeps a cache-rich endpoint from being piled
			// on: a holder too far above the least loaded is passed over
			// for the next best holder.
			switch {
			case t.o.Costs == nil && LoadGuardTrips(cands[i].Load, minLoad, t.o.LoadGuard):
				guarded = true
			case best < 0 || w > bestW || (w == bestW && cands[i].Load < cands[best].Load):
				best, bestW = i, w
			}
		}
		if explain {
			scores[i] = spec.CandidateScore{ID: cands[i].ID, Load: cands[i].Load, Blocks: s.Blocks, GPUBlocks: s.GPUBlocks,
				CPUBlocks: s.CPUBlocks, PendingBlocks: pending, Score: w, Trusted: trusted, Untrusted: why}
		}
	}
	if t.o.Costs != nil {
		// Priced even when nothing is cached, so the tier after a miss
		// and the placement reuse the same prices.
		if c := t.costPick(f, len(ids), len(keys), ws, cands, scores, explain); anyHit && anyTrusted {
			best = c
		}
	}
	if !explain {
		f.KVPending = best >= 0 && anyHit && pend[best] > raw[best].Blocks
	}
	if t.o.Watchdog != nil && anyTrusted && !explain {
		if t.o.Watchdog.Observe(anyHit) {
			if m := t.o.Metrics; m != nil {
				m.ZeroHitWatchdog.WithLabelValues(t.o.Rule).Inc()
			}
			t.o.Logger.WithFields(logrus.Fields{"rule": t.o.Rule, "lookups": t.o.Watchdog.N(), "block_size": blockSizeOf(t.o.Index)}).
				Warn("kvexact: consecutive KV-exact lookups found no cached block while engines publish events; " +
					"check that kvBlockSize equals the engines' block size, that the engines tokenise with the same model and chat template, and the rule's model name")
		}
	}
	switch {
	case !anyTrusted:
		return -1, ReasonUntrusted, false, scores
	case !anyHit:
		return -1, ReasonMiss, false, scores
	case best < 0 && guarded:
		return -1, ReasonLoadGuard, false, scores
	}
	return best, "", true, scores
}

// costPick prices every candidate (pick.Costs: queue, the prefill backlog
// this gateway sent it, the prefill of the tokens it does not hold, KV
// saturation) for a prompt of tokens tokens in blocks full blocks, where
// ws are the trusted weighted block scores (0 for an untrusted inventory:
// it is treated as cold), fills the estimates into scores when explaining,
// and returns the cheapest. A dry run leaves f's prices alone.
func (t *KVExact) costPick(f *Facts, tokens, blocks int, ws []float64, cands []Candidate, scores []spec.CandidateScore, dry bool) int {
	bs := blockSizeOf(t.o.Index)
	if bs <= 0 { // an index that does not say: the prompt's own ratio
		bs = tokens / blocks
	}
	var cBuf [16]int
	cached := cBuf[:0]
	for i := range cands {
		cached = append(cached, int(ws[i]*float64(bs)))
	}
	pf := f
	if dry {
		c := *f
		pf = &c
	}
	prices := t.o.Costs.Price(pf, cands, tokens, cached)
	var eBuf [16]time.Duration // a pool's candidates fit without a heap allocation
	est := eBuf[:0]
	for i := range prices {
		est = append(est, prices[i].Total())
		if scores != nil {
			scores[i].EstimateMs = ms(est[i])
			scores[i].QueueMs, scores[i].BacklogMs = ms(prices[i].Queue), ms(prices[i].Backlog)
			scores[i].PrefillMs, scores[i].SaturationMs = ms(prices[i].Prefill), ms(prices[i].Saturation)
		}
	}
	return pick.Cheapest(est, cached, cands)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// blockSizeOf reports the index's block size for the watchdog's log.
func blockSizeOf(ix KVIndex) int {
	if b, ok := ix.(interface{ BlockSize() int }); ok {
		return b.BlockSize()
	}
	return 0
}

// Watchdog detects silent parity failures: N consecutive lookups with no
// hit on any trusted inventory while events keep arriving mean the gateway
// computes keys the engines never publish (block size, tokenizer, chat
// template or model mismatch). It fires once per streak; a hit re-arms it.
type Watchdog struct {
	n       int64
	flowing func() bool
	streak  atomic.Int64
}

// DefaultWatchdogN is the default streak length.
const DefaultWatchdogN = 200

// NewWatchdog builds a watchdog firing after n zero-hit lookups (n ≤ 0:
// DefaultWatchdogN) while flowing reports that events were applied recently
// (nil: always).
func NewWatchdog(n int, flowing func() bool) *Watchdog {
	if n <= 0 {
		n = DefaultWatchdogN
	}
	return &Watchdog{n: int64(n), flowing: flowing}
}

// N is the streak length that fires.
func (w *Watchdog) N() int { return int(w.n) }

// Observe records one lookup and reports whether this one fired the
// watchdog. Lookups while no events flow neither count nor reset: a quiet
// fleet is not a parity problem.
func (w *Watchdog) Observe(hit bool) bool {
	if hit {
		w.streak.Store(0)
		return false
	}
	if w.flowing != nil && !w.flowing() {
		return false
	}
	return w.streak.Add(1) == w.n
}

// EventsFlowing returns a predicate for NewWatchdog: true when last (unix
// nanoseconds of the last applied batch, 0 = never) is within window of now.
func EventsFlowing(last *atomic.Int64, window time.Duration, now func() time.Time) func() bool {
	return func() bool {
		l := last.Load()
		return l != 0 && now().Sub(time.Unix(0, l)) <= window
	}
}
