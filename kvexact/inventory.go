package kvexact

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/metrics"
)

// Clock is the time source of trust decisions (warm-up), injectable in tests.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Defaults of Options.
const (
	DefaultBlockSize = 16
	DefaultBudget    = 1_000_000
	DefaultWarmup    = 10 * time.Second
	DefaultShards    = 64
	// DefaultStaleAfter: a real engine publishes BlockStored within
	// milliseconds of computing a new full block, so half a minute of work
	// with no event at all means the feed stopped, not that it is slow.
	DefaultStaleAfter = 30 * time.Second
	// DefaultLiveWindow is how recent the last event of a passive (bind
	// topology) rank must be for it to be reported connected.
	DefaultLiveWindow = 2 * time.Minute
)

// Options configures one rule's inventory.
type Options struct {
	Rule string // metric label and log field
	// BlockSize is the configured kvBlockSize, used until a BlockStored event
	// teaches the real one; later events of another size are counted and skipped.
	BlockSize int
	// Budget caps indexed blocks per rule; beyond it the least recently
	// stored block is evicted (per shard).
	Budget int
	// Warmup is how long a (endpoint, rank) must have been connected, after
	// a connect or a reset, before its inventory is trusted; replay from seq 0
	// makes it trusted at once.
	Warmup time.Duration
	// StaleAfter bounds trust in an endpoint whose event feed went quiet
	// while its socket stayed connected (a stuck publisher, a frozen host):
	// once work was sent to the endpoint (NoteWork) and no event of any of
	// its ranks arrived for StaleAfter, it is untrusted (ReasonStale) until
	// its next event. An idle endpoint is not stale. Negative disables.
	StaleAfter time.Duration
	// Passive marks the bind topology: engines connect to one bound socket,
	// so there is no per-engine connection signal. A rank becomes connected
	// on each event it sends (warm-up then starts), its blocks are dropped
	// when its endpoint's health goes down (EndpointDown), and Ranks reports
	// it connected only while its last event is within LiveWindow. Trust
	// does not need recent events: an engine serving only prefix hits
	// publishes nothing and stays the best holder.
	Passive bool
	// LiveWindow bounds "connected" of a passive rank (0: DefaultLiveWindow).
	LiveWindow time.Duration
	// Shards is the number of lock shards, rounded up to a power of two.
	Shards int
	// EngineMapLimit bounds each (endpoint, rank)'s engine-hash → own-key map;
	// on overflow the map is reset (its removals then become no-ops and the
	// affected blocks age out through the budget).
	EngineMapLimit int
	Clock          Clock
	Metrics        *metrics.KV // nil: no metrics
	Logger         logrus.FieldLogger
	// Pending is the rule's table of placements not yet published (nil:
	// none): whenever the inventory drops an endpoint's blocks (its
	// engine cleared its cache, restarted, lost events, went down, or left
	// the rule) it drops that endpoint's notes too, so a prompt sent
	// before the loss is not counted as held after it.
	Pending *Pending
}

// DefaultOptions returns the defaults for rule.
func DefaultOptions(rule string) Options {
	return Options{
		Rule:           rule,
		BlockSize:      DefaultBlockSize,
		Budget:         DefaultBudget,
		Warmup:         DefaultWarmup,
		StaleAfter:     DefaultStaleAfter,
		LiveWindow:     DefaultLiveWindow,
		Shards:         DefaultShards,
		EngineMapLimit: 2 * DefaultBudget,
		Clock:          wallClock{},
		Logger:         logrus.StandardLogger(),
	}
}

// Untrust reasons reported by Trusted.
const (
	ReasonUnknownEndpoint = "unknown_endpoint"
	ReasonDisconnected    = "disconnected"
	ReasonWarmup          = "warmup"
	ReasonSeqGap          = "seq_gap"
	ReasonRestart         = "restart"
	// ReasonStale: work was sent to the endpoint StaleAfter ago and none of
	// its ranks has published an event since.
	ReasonStale = "stale"
	// ReasonReconnect: the subscriber lost the engine's PUB socket and got
	// it back. PUB drops everything for a missing subscriber and the engine
	// may have restarted with an empty cache, so the rank was cleared.
	ReasonReconnect = "reconnect"
	// ReasonHealthDown: the endpoint's health probe went down; its blocks
	// were dropped (a killed engine's cache is gone) until it publishes again.
	ReasonHealthDown = "health_down"
)

// Skip reasons of stored blocks that are not indexed (metric label).
const (
	skipUnanchored = "unanchored" // parent engine hash unknown: chain cannot be keyed
	skipExtraKeys  = "extra_keys" // LoRA / multimodal / salt: not reproducible from tokens
	skipTokens     = "tokens"     // len(token_ids) != blocks × block_size
	skipMedium     = "medium"     // tier other than GPU/CPU
	skipGroup      = "group"      // non full-attention KV-cache group
	skipBlockSize  = "block_size" // event block size differs from the inventory's
)

// streamStart reports whether seq is the first batch of a publisher's
// stream: vLLM counts from 0, other publishers from 1. A (re)started engine
// has an empty cache, so an inventory that saw its stream from here on
// knows everything it holds and needs no warm-up.
func streamStart(seq uint64) bool { return seq <= 1 }

type slotKey struct {
	endpoint string
	rank     int
}

// slot is the state of one (endpoint, rank) event stream.
type slot struct {
	bit      uint64
	endpoint string
	rank     int

	// applyMu serialises the stream's writer: sequencing and engine map.
	applyMu sync.Mutex
	hasSeq  bool
	lastSeq uint64
	engine  u64map // engine hash → own key
	// otherGroups has bit g set when KV-cache group g was seen storing a
	// non full-attention kind: hybrid models publish the same hashes per
	// group, so that group's removals must not drop full-attention residency.
	otherGroups uint64
	scratch     []uint64

	blocksGauge prometheus.Gauge // loxilb_pd_kv_blocks of the endpoint; nil without metrics

	// workSince is shared by every rank of the endpoint: the UnixNano of the
	// first NoteWork since the endpoint's last event, 0 when none is pending.
	workSince *atomic.Int64

	// stateMu guards trust state, read on the request path.
	stateMu   sync.Mutex
	connected bool
	everUp    bool      // connected at least once: the next connect is a reconnect
	since     time.Time // start of the current clean, connected window
	heard     time.Time // last event (passive ranks)
	rebuilt   bool      // replay from seq 0, or a stream seen from its start, since the last reset
	reason    string    // why the last reset happened ("" = none)
}

// Inventory is one rule's KV block inventory. Writers are the rule's
// subscribers (one per endpoint rank); readers are request-path lookups.
type Inventory struct {
	opts   Options
	shards []shard
	shift  uint
	counts slotCounts

	blockSize atomic.Int64
	learned   atomic.Bool
	evicted   atomic.Uint64 // evictions not yet added to the metric

	slotsMu    sync.RWMutex
	slots      map[slotKey]*slot
	byEndpoint map[string][]*slot
	used       uint64 // allocated slot bits

	m *invMetrics
}

type invMetrics struct {
	stored, removed, cleared, unknown, evictions prometheus.Counter
}

// NewInventory builds an empty inventory; zero option fields take defaults.
func NewInventory(opts Options) *Inventory {
	def := DefaultOptions(opts.Rule)
	if opts.BlockSize <= 0 {
		opts.BlockSize = def.BlockSize
	}
	if opts.Budget <= 0 {
		opts.Budget = def.Budget
	}
	if opts.Warmup < 0 {
		opts.Warmup = 0
	}
	if opts.StaleAfter == 0 {
		opts.StaleAfter = def.StaleAfter
	}
	if opts.Shards <= 0 {
		opts.Shards = def.Shards
	}
	if opts.LiveWindow <= 0 {
		opts.LiveWindow = def.LiveWindow
	}
	if opts.EngineMapLimit <= 0 {
		opts.EngineMapLimit = 2 * opts.Budget
	}
	if opts.Clock == nil {
		opts.Clock = def.Clock
	}
	if opts.Logger == nil {
		opts.Logger = def.Logger
	}
	n := 1 << bits.Len(uint(opts.Shards-1))
	inv := &Inventory{
		opts:       opts,
		shards:     make([]shard, n),
		shift:      uint(64 - bits.TrailingZeros(uint(n))),
		slots:      map[slotKey]*slot{},
		byEndpoint: map[string][]*slot{},
	}
	per := (opts.Budget + n - 1) / n
	seed := rand.Uint64()
	for i := range inv.shards {
		inv.shards[i].init(per, seed, &inv.evicted)
	}
	inv.blockSize.Store(int64(opts.BlockSize))
	if m := opts.Metrics; m != nil {
		inv.m = &invMetrics{
			stored:    m.EventsApplied.WithLabelValues(opts.Rule, TagBlockStored),
			removed:   m.EventsApplied.WithLabelValues(opts.Rule, TagBlockRemoved),
			cleared:   m.EventsApplied.WithLabelValues(opts.Rule, TagAllBlocksCleared),
			unknown:   m.UnknownEvents.WithLabelValues(opts.Rule),
			evictions: m.Evictions.WithLabelValues(opts.Rule),
		}
	}
	return inv
}

func (inv *Inventory) shardOf(key uint64) *shard { return &inv.shards[inv.shardIndex(key)] }

func (inv *Inventory) shardIndex(key uint64) int {
	if len(inv.shards) == 1 {
		return 0
	}
	return int(key >> inv.shift)
}

// BlockSize is the block size own keys are computed with: learned from the
// first BlockStored event, else the configured one.
func (inv *Inventory) BlockSize() int { return int(inv.blockSize.Load()) }

// RequestKeys computes a request's own keys at the inventory's block size.
func (inv *Inventory) RequestKeys(tokens []uint32) []uint64 {
	return KeysForTokens(tokens, inv.BlockSize())
}

// AppendRequestKeys is RequestKeys appended to dst, for a caller that
// reuses one slice across requests instead of allocating the keys of every
// prompt.
func (inv *Inventory) AppendRequestKeys(dst []uint64, tokens []uint32) []uint64 {
	return AppendOwnKeys(dst, RootKey, tokens, inv.BlockSize())
}

// slotFor returns (creating) the slot of (endpoint, rank).
func (inv *Inventory) slotFor(endpoint string, rank int) (*slot, error) {
	k := slotKey{endpoint, rank}
	inv.slotsMu.RLock()
	s := inv.slots[k]
	inv.slotsMu.RUnlock()
	if s != nil {
		return s, nil
	}
	inv.slotsMu.Lock()
	defer inv.slotsMu.Unlock()
	if s = inv.slots[k]; s != nil {
		return s, nil
	}
	if inv.used == ^uint64(0) {
		return nil, fmt.Errorf("kvexact: rule %q: more than %d endpoint ranks", inv.opts.Rule, MaxSlots)
	}
	b := bits.TrailingZeros64(^inv.used)
	s = &slot{bit: 1 << b, endpoint: endpoint, rank: rank, engine: u64map{seed: rand.Uint64()}, since: inv.opts.Clock.Now()}
	if m := inv.opts.Metrics; m != nil {
		s.blocksGauge = m.Blocks.WithLabelValues(inv.opts.Rule, endpoint)
	}
	if peers := inv.byEndpoint[endpoint]; len(peers) > 0 {
		s.workSince = peers[0].workSince
	} else {
		s.workSince = new(atomic.Int64)
	}
	inv.used |= s.bit
	inv.slots[k] = s
	inv.byEndpoint[endpoint] = append(inv.byEndpoint[endpoint], s)
	return s, nil
}

// RemoveEndpoint forgets an endpoint and all its blocks. Stop its
// subscribers first: a concurrent Apply for it would re-create it.
func (inv *Inventory) RemoveEndpoint(endpoint string) {
	inv.slotsMu.Lock()
	ss := inv.byEndpoint[endpoint]
	delete(inv.byEndpoint, endpoint)
	var mask uint64
	for _, s := range ss {
		delete(inv.slots, slotKey{s.endpoint, s.rank})
		mask |= s.bit
	}
	inv.slotsMu.Unlock()
	inv.clearMask(mask)
	inv.opts.Pending.Forget(endpoint)
	inv.slotsMu.Lock()
	inv.used &^= mask // bits are reusable only once no entry carries them
	inv.slotsMu.Unlock()
	if inv.opts.Metrics != nil {
		inv.opts.Metrics.ForgetEndpoint(inv.opts.Rule, endpoint)
	}
}

func (inv *Inventory) clearMask(mask uint64) {
	if mask == 0 {
		return
	}
	for i := range inv.shards {
		sh := &inv.shards[i]
		sh.mu.Lock()
		sh.clearBits(mask)
		sh.mu.Unlock()
	}
	for m := mask; m != 0; m &= m - 1 {
		inv.counts[bits.TrailingZeros64(m)].Store(0)
	}
}

// ApplyResult says what Apply noticed about the stream.
type ApplyResult struct {
	Gap      bool   // seq jumped forward: events were lost, the rank was cleared
	Restart  bool   // seq went backwards: engine restarted, the rank was cleared
	Expected uint64 // the seq that was expected when Gap or Restart
	Err      error  // slot table full; nothing applied
}

// NextSeq returns the next expected sequence number of (endpoint, rank), and
// false before its first batch. Subscribers use it to detect a gap before
// Apply and repair it by replay.
func (inv *Inventory) NextSeq(endpoint string, rank int) (uint64, bool) {
	inv.slotsMu.RLock()
	s := inv.slots[slotKey{endpoint, rank}]
	inv.slotsMu.RUnlock()
	if s == nil {
		return 0, false
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.lastSeq + 1, s.hasSeq
}

// Apply applies one batch of (endpoint, rank) with sequence seq. A forward
// gap or a regression clears that rank's blocks and marks it untrusted
// before the batch is applied; the batch itself is then indexed.
func (inv *Inventory) Apply(endpoint string, rank int, seq uint64, batch Batch) ApplyResult {
	s, err := inv.slotFor(endpoint, rank)
	if err != nil {
		return ApplyResult{Err: err}
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	var res ApplyResult
	if s.hasSeq && seq != s.lastSeq+1 {
		res.Expected = s.lastSeq + 1
		reason := ReasonSeqGap
		if seq > s.lastSeq {
			res.Gap = true
		} else {
			res.Restart, reason = true, ReasonRestart
		}
		// A restart seen from its stream's start is fully observed: the
		// rank is rebuilt (trusted) in the same step that clears it.
		inv.resetSlotTo(s, reason, res.Restart && streamStart(seq))
		inv.opts.Logger.WithFields(logrus.Fields{
			"rule": inv.opts.Rule, "endpoint": endpoint, "rank": rank, "seq": seq, "expected": res.Expected, "reason": reason,
		}).Info("kvexact: KV event stream discontinuity, inventory cleared")
	}
	if inv.opts.Passive {
		inv.heard(s)
	}
	s.hasSeq, s.lastSeq = true, seq
	if s.workSince.Load() != 0 {
		s.workSince.Store(0) // the feed is alive: pending work is accounted for
	}
	for i := range batch.Events {
		inv.applyEvent(s, &batch.Events[i])
	}
	if m := inv.m; m != nil {
		if batch.Unknown > 0 {
			m.unknown.Add(float64(batch.Unknown))
		}
		s.blocksGauge.Set(float64(inv.Blocks(endpoint)))
		inv.opts.Metrics.ObserveEvent(inv.opts.Rule, endpoint, inv.opts.Clock.Now())
		inv.drainEvictions()
	}
	return res
}

// drainEvictions moves pending evictions into the metric and, since an
// eviction may have taken any endpoint's blocks, refreshes every endpoint's
// block gauge.
func (inv *Inventory) drainEvictions() {
	if inv.evicted.Load() == 0 {
		return
	}
	n := inv.evicted.Swap(0)
	if n == 0 {
		return
	}
	inv.m.evictions.Add(float64(n))
	inv.slotsMu.RLock()
	defer inv.slotsMu.RUnlock()
	for _, ss := range inv.byEndpoint {
		var sum int64
		for _, s := range ss {
			sum += inv.counts[bits.TrailingZeros64(s.bit)].Load()
		}
		if len(ss) > 0 && ss[0].blocksGauge != nil {
			ss[0].blocksGauge.Set(float64(sum))
		}
	}
}

// resetSlot clears the slot's blocks and engine map; reason "" keeps trust
// (AllBlocksCleared is a legitimate, fully observed engine state).
func (inv *Inventory) resetSlot(s *slot, reason string) { inv.resetSlotTo(s, reason, false) }

// resetSlotTo is resetSlot that leaves the rank rebuilt (trusted; the
// reason is still counted) when rebuilt is set. The trust state changes
// before the blocks are cleared: a rank losing trust is untrusted before
// its blocks go, and a rebuilt one never shows a passing untrusted state.
func (inv *Inventory) resetSlotTo(s *slot, reason string, rebuilt bool) {
	inv.opts.Pending.Forget(s.endpoint)
	if reason == "" {
		inv.clearMask(s.bit)
		s.engine.reset()
		return
	}
	s.otherGroups = 0 // a restarted engine may serve another model
	s.stateMu.Lock()
	s.reason, s.rebuilt, s.since = reason, false, inv.opts.Clock.Now()
	if rebuilt {
		s.reason, s.rebuilt = "", true
	}
	s.stateMu.Unlock()
	inv.clearMask(s.bit)
	s.engine.reset()
	if m := inv.opts.Metrics; m != nil {
		switch reason {
		case ReasonSeqGap:
			m.SeqGaps.WithLabelValues(inv.opts.Rule, s.endpoint, fmt.Sprint(s.rank)).Inc()
		case ReasonRestart:
			m.Restarts.WithLabelValues(inv.opts.Rule, s.endpoint, fmt.Sprint(s.rank)).Inc()
		}
	}
}

func (inv *Inventory) skip(reason string, n int) {
	if inv.opts.Metrics != nil && n > 0 {
		inv.opts.Metrics.SkippedBlocks.WithLabelValues(inv.opts.Rule, reason).Add(float64(n))
	}
}

func (inv *Inventory) applyEvent(s *slot, e *Event) {
	switch e.Kind {
	case EventBlockStored:
		if inv.m != nil {
			inv.m.stored.Inc()
		}
		inv.applyStored(s, e)
	case EventBlockRemoved:
		if inv.m != nil {
			inv.m.removed.Inc()
		}
		if e.Medium == MediumOther || (e.HasGroup && e.GroupIdx < 64 && s.otherGroups&(1<<e.GroupIdx) != 0) {
			return
		}
		cpu := e.Medium == MediumCPU
		for _, h := range e.BlockHashes {
			own, ok := s.engine.get(h)
			if !ok {
				continue
			}
			sh := inv.shardOf(own)
			sh.mu.Lock()
			held := sh.remove(own, s.bit, cpu, &inv.counts)
			sh.mu.Unlock()
			if !held {
				s.engine.del(h)
			}
		}
	case EventAllBlocksCleared:
		if inv.m != nil {
			inv.m.cleared.Inc()
		}
		inv.resetSlot(s, "")
	}
}

func (inv *Inventory) applyStored(s *slot, e *Event) {
	n := len(e.BlockHashes)
	switch {
	case e.Medium == MediumOther:
		inv.skip(skipMedium, n)
		return
	case e.SpecKind != "" && e.SpecKind != SpecKindFullAttention:
		if e.HasGroup && e.GroupIdx < 64 {
			s.otherGroups |= 1 << e.GroupIdx
		}
		inv.skip(skipGroup, n)
		return
	case e.HasExtraKeys || e.LoraName != "" || e.HasLoraID:
		inv.skip(skipExtraKeys, n)
		return
	}
	bs := int64(e.BlockSize)
	if !inv.learned.Load() && inv.learned.CompareAndSwap(false, true) {
		if old := inv.blockSize.Swap(bs); old != bs {
			inv.opts.Logger.WithFields(logrus.Fields{"rule": inv.opts.Rule, "configured": old, "learned": bs}).
				Warn("kvexact: block size learned from events differs from the configured kvBlockSize; keying with the learned one, fix the rule")
		}
	}
	if cur := inv.blockSize.Load(); cur != bs {
		if inv.opts.Metrics != nil {
			inv.opts.Metrics.BlockSizeMismatches.WithLabelValues(inv.opts.Rule, s.endpoint).Inc()
		}
		inv.skip(skipBlockSize, n)
		return
	}
	cpu := e.Medium == MediumCPU
	if len(e.TokenIDs) == 0 {
		// Offload-tier store: no tokens, same engine hashes as the GPU copy.
		for _, h := range e.BlockHashes {
			if own, ok := s.engine.get(h); ok {
				inv.storeKey(own, s.bit, cpu)
			} else {
				inv.skip(skipUnanchored, 1)
			}
		}
		return
	}
	if len(e.TokenIDs) != n*int(bs) {
		inv.skip(skipTokens, n)
		return
	}
	parent := RootKey
	if e.HasParent {
		p, ok := s.engine.get(e.ParentHash)
		switch {
		case ok:
			parent = p
		case e.ParentHash == 0:
			// Some publishers encode "no parent" as 0 instead of nil. A real
			// hash of 0 is a 2^-64 event, and only an unknown 0 is read so:
			// every other unknown parent still fails the anchoring check.
			if inv.opts.Metrics != nil {
				inv.opts.Metrics.RootParentZero.WithLabelValues(inv.opts.Rule).Inc()
			}
		default:
			inv.skip(skipUnanchored, n)
			return
		}
	}
	s.scratch = AppendOwnKeys(s.scratch[:0], parent, e.TokenIDs, int(bs))
	if s.engine.len()+n > inv.opts.EngineMapLimit {
		s.engine.reset()
	}
	for i, own := range s.scratch {
		s.engine.put(e.BlockHashes[i], own)
		inv.storeKey(own, s.bit, cpu)
	}
}

func (inv *Inventory) storeKey(own, bit uint64, cpu bool) {
	sh := inv.shardOf(own)
	sh.mu.Lock()
	sh.store(own, bit, cpu, &inv.counts)
	sh.mu.Unlock()
}

// SetConnected records the subscriber's connection state of (endpoint,
// rank), as seen by the ZMQ socket monitor. A connect restarts warm-up; a
// reconnect also clears the rank: events published while it was away are
// lost and a killed-and-restarted engine starts with an empty cache, so the
// old blocks must not be trusted again after warm-up. The sequence is kept,
// so the first event still tells a restart (regression) from a gap.
func (inv *Inventory) SetConnected(endpoint string, rank int, connected bool) error {
	s, err := inv.slotFor(endpoint, rank)
	if err != nil {
		return err
	}
	s.stateMu.Lock()
	reconnect := connected && !s.connected && s.everUp
	if connected && !s.connected {
		s.since = inv.opts.Clock.Now()
	}
	s.everUp = s.everUp || connected
	s.connected = connected
	s.stateMu.Unlock()
	if reconnect {
		s.applyMu.Lock()
		inv.resetSlot(s, ReasonReconnect)
		s.applyMu.Unlock()
		if s.blocksGauge != nil {
			s.blocksGauge.Set(float64(inv.Blocks(endpoint)))
		}
		inv.opts.Logger.WithFields(logrus.Fields{"rule": inv.opts.Rule, "endpoint": endpoint, "rank": rank}).
			Info("kvexact: KV event publisher reconnected, inventory cleared")
	}
	return nil
}

// heard marks a passive rank connected by an event: the first one since
// creation or EndpointDown starts its warm-up.
func (inv *Inventory) heard(s *slot) {
	now := inv.opts.Clock.Now()
	s.stateMu.Lock()
	if !s.connected {
		s.connected, s.everUp = true, true
		if s.reason == ReasonHealthDown {
			s.reason = ""
		}
		if !s.rebuilt {
			s.since = now
		}
	}
	s.heard = now
	s.stateMu.Unlock()
}

// EndpointDown drops every rank's blocks of endpoint because its health
// probe went down: a killed engine's cache is gone, and in the bind
// topology nothing else would say so before its next event. The ranks stay
// untrusted (ReasonHealthDown) until they publish again (passive) or for
// warm-up (dialled: the socket monitor still says connected). Sequences
// are kept, so a restarted engine's first batch reads as the restart it is.
func (inv *Inventory) EndpointDown(endpoint string) {
	inv.slotsMu.RLock()
	ss := append([]*slot(nil), inv.byEndpoint[endpoint]...)
	inv.slotsMu.RUnlock()
	for _, s := range ss {
		s.applyMu.Lock()
		inv.resetSlot(s, ReasonHealthDown)
		if inv.opts.Passive {
			s.stateMu.Lock()
			s.connected = false
			s.stateMu.Unlock()
		}
		s.applyMu.Unlock()
	}
	if len(ss) > 0 {
		if g := ss[0].blocksGauge; g != nil {
			g.Set(float64(inv.Blocks(endpoint)))
		}
		ss[0].workSince.Store(0)
		inv.opts.Logger.WithFields(logrus.Fields{"rule": inv.opts.Rule, "endpoint": endpoint}).
			Info("kvexact: endpoint health went down, its KV inventory was cleared")
	}
}

// MarkRebuilt records that (endpoint, rank) was rebuilt by a replay from
// the start of the engine's stream: it is trusted without warm-up.
func (inv *Inventory) MarkRebuilt(endpoint string, rank int) error {
	s, err := inv.slotFor(endpoint, rank)
	if err != nil {
		return err
	}
	s.stateMu.Lock()
	s.rebuilt, s.reason = true, ""
	s.stateMu.Unlock()
	return nil
}

// Trusted reports whether the endpoint's inventory may steer requests: every
// known rank must be connected and either rebuilt by replay or past warm-up
// since its last connect or reset. The reason names the first failing rank.
func (inv *Inventory) Trusted(endpoint string) (bool, string) {
	inv.slotsMu.RLock()
	ss := inv.byEndpoint[endpoint]
	inv.slotsMu.RUnlock()
	return inv.trustedAt(ss, inv.opts.Clock.Now())
}

// TrustedMask is Trusted for a whole decision's candidates at once: bit i
// is set when endpoints[i] (the first 64) is trusted. One read lock on the
// endpoint table and one clock read serve every candidate, where a call of
// Trusted per candidate took both each time on the pick's hot path.
func (inv *Inventory) TrustedMask(endpoints []string) uint64 {
	var buf [64][]*slot
	ranks := buf[:min(len(endpoints), len(buf))]
	inv.slotsMu.RLock()
	for i := range ranks {
		ranks[i] = inv.byEndpoint[endpoints[i]]
	}
	inv.slotsMu.RUnlock()
	now := inv.opts.Clock.Now()
	var mask uint64
	for i, ss := range ranks {
		if ok, _ := inv.trustedAt(ss, now); ok {
			mask |= 1 << i
		}
	}
	return mask
}

// trustedAt is Trusted over one endpoint's ranks ss at now.
func (inv *Inventory) trustedAt(ss []*slot, now time.Time) (bool, string) {
	if len(ss) == 0 {
		return false, ReasonUnknownEndpoint
	}
	for _, s := range ss {
		s.stateMu.Lock()
		connected, since, rebuilt, reason := s.connected, s.since, s.rebuilt, s.reason
		s.stateMu.Unlock()
		if ok, why := rankTrust(connected, rebuilt, now.Sub(since), inv.opts.Warmup, reason); !ok {
			return false, why
		}
	}
	if inv.stale(ss[0], now) {
		return false, ReasonStale
	}
	return true, ""
}

// NoteWork records that a request was sent to endpoint. Unless one of its
// ranks publishes an event within StaleAfter, the endpoint is untrusted:
// its feed stopped while the engine kept changing its cache. Unknown
// endpoints are ignored. Cheap enough for every routed request.
func (inv *Inventory) NoteWork(endpoint string) {
	inv.slotsMu.RLock()
	ss := inv.byEndpoint[endpoint]
	inv.slotsMu.RUnlock()
	if len(ss) == 0 || inv.opts.StaleAfter < 0 {
		return
	}
	if ss[0].workSince.Load() == 0 {
		ss[0].workSince.CompareAndSwap(0, inv.opts.Clock.Now().UnixNano())
	}
}

// stale reports whether work sent to s's endpoint has waited longer than
// StaleAfter for an event.
func (inv *Inventory) stale(s *slot, now time.Time) bool {
	if inv.opts.StaleAfter < 0 {
		return false
	}
	ws := s.workSince.Load()
	return ws != 0 && now.Sub(time.Unix(0, ws)) > inv.opts.StaleAfter
}

// Blocks returns the number of blocks indexed for endpoint, summed over its
// ranks (a block held by two ranks counts twice).
func (inv *Inventory) Blocks(endpoint string) int {
	inv.slotsMu.RLock()
	defer inv.slotsMu.RUnlock()
	n := int64(0)
	for _, s := range inv.byEndpoint[endpoint] {
		n += inv.counts[bits.TrailingZeros64(s.bit)].Load()
	}
	return int(n)
}

// Len returns the number of distinct indexed blocks.
func (inv *Inventory) Len() int {
	n := 0
	for i := range inv.shards {
		sh := &inv.shards[i]
		sh.mu.RLock()
		n += sh.len()
		sh.mu.RUnlock()
	}
	return n
}

// Score is one candidate's prefix match.
type Score struct {
	Endpoint string
	// Blocks is the number of consecutive blocks from block 0 held on any tier.
	Blocks int
	// GPUBlocks and CPUBlocks split Blocks by the best tier holding each block.
	GPUBlocks int
	CPUBlocks int
	// Rank is the data-parallel rank holding the longest run of those
	// blocks from block 0 (the lowest such rank on a tie); meaningful only
	// when Blocks > 0. An engine with several DP ranks keeps a KV cache per
	// rank, so a request routed to this rank reuses the run.
	Rank int
}

// Weighted is the tier-weighted prefix score (llm-d weights GPU 1.0, CPU 0.8).
func (s Score) Weighted(cpuWeight float64) float64 {
	return float64(s.GPUBlocks) + cpuWeight*float64(s.CPUBlocks)
}

// ScoreTokens scores a request's token ids (full blocks at the inventory's
// block size); tokenisation is the caller's.
func (inv *Inventory) ScoreTokens(tokens []uint32, candidates []string) []Score {
	return inv.Score(inv.RequestKeys(tokens), candidates)
}

// Score returns, per candidate (same order), how many consecutive blocks of
// blockKeys from block 0 it holds, on any of its ranks. It looks blocks up
// a window at a time (lookup) and stops once no candidate is still matching.
// Trust is not checked here: callers gate on Trusted. Only the first 64
// candidates are scored (a rule has at most 64 endpoint ranks anyway).
func (inv *Inventory) Score(blockKeys []uint64, candidates []string) []Score {
	out := make([]Score, len(candidates))
	var maskBuf, runBuf [16]uint64
	masks := maskBuf[:0]
	var rankBuf [32]slotRank
	ranks := rankBuf[:0]
	var alive uint64 // bit c: candidate c (first 64) still matching
	inv.slotsMu.RLock()
	for c, ep := range candidates {
		out[c].Endpoint = ep
		var m uint64
		for _, s := range inv.byEndpoint[ep] {
			m |= s.bit
			ranks = append(ranks, slotRank{s.bit, s.rank})
		}
		masks = append(masks, m)
		if m != 0 && c < 64 {
			alive |= 1 << c
		}
	}
	inv.slotsMu.RUnlock()
	// runs[c]: the slots of candidate c that hold every block so far,
	// narrowed only while some still does (the longest run's ranks).
	runs := append(runBuf[:0], masks...)
	var gpus, cpus [scoreWindow]uint64
	// Block 0 alone first: a prompt nobody holds costs one lookup.
	for lo, n := 0, 1; lo < len(blockKeys) && alive != 0; lo, n = lo+n, scoreWindow {
		n = min(n, len(blockKeys)-lo)
		inv.lookup(blockKeys[lo:lo+n], gpus[:n], cpus[:n])
		for j := 0; j < n && alive != 0; j++ {
			alive = scoreBlock(out, masks, runs, alive, gpus[j], cpus[j])
		}
	}
	for c := range out {
		if out[c].Blocks > 0 {
			out[c].Rank = lowestRank(ranks, runs[c])
		}
	}
	return out
}

// scoreWindow is how many blocks Score looks up under one round of shard
// read locks. Taking a read lock is an atomic read-modify-write, which on
// common CPUs waits for every earlier load: locking around each lookup
// made the lookups' cache misses queue one behind the other. Under one
// round of locks a window's lookups are independent loads the CPU
// overlaps; a window costs at most scoreWindow-1 lookups past the end of
// the longest run.
const scoreWindow = 16

// lookup reads the tiers holding each of keys (at most scoreWindow) into
// gpus and cpus. The shards involved are read-locked together, in
// ascending order, so two lookups never wait on each other's locks in a
// cycle (writers take one shard at a time).
func (inv *Inventory) lookup(keys, gpus, cpus []uint64) {
	if len(inv.shards) > 64 { // more shards than a mask holds: one lock per block
		for j, k := range keys {
			sh := inv.shardOf(k)
			sh.mu.RLock()
			gpus[j], cpus[j] = sh.get(k)
			sh.mu.RUnlock()
		}
		return
	}
	var locked uint64
	for _, k := range keys {
		locked |= 1 << inv.shardIndex(k)
	}
	for m := locked; m != 0; m &= m - 1 {
		inv.shards[bits.TrailingZeros64(m)].mu.RLock()
	}
	for j, k := range keys {
		gpus[j], cpus[j] = inv.shardOf(k).get(k)
	}
	for m := locked; m != 0; m &= m - 1 {
		inv.shards[bits.TrailingZeros64(m)].mu.RUnlock()
	}
}

// scoreBlock adds one block, held on the slots gpu and cpu, to the scores
// of the candidates still matching (alive), narrows their runs, and
// returns the candidates that still match after it.
func scoreBlock(out []Score, masks, runs []uint64, alive, gpu, cpu uint64) uint64 {
	held := gpu | cpu
	for a := alive; a != 0; a &= a - 1 {
		c := bits.TrailingZeros64(a)
		m := masks[c]
		if r := runs[c] & held; r != 0 {
			runs[c] = r
		}
		switch {
		case gpu&m != 0:
			out[c].Blocks++
			out[c].GPUBlocks++
		case held&m != 0:
			out[c].Blocks++
			out[c].CPUBlocks++
		default:
			alive &^= 1 << c
		}
	}
	return alive
}

// slotRank maps a slot's bit to its DP rank, copied out under slotsMu so
// Score reads it without the lock.
type slotRank struct {
	bit  uint64
	rank int
}

// lowestRank is the lowest rank among the slots in mask.
func lowestRank(ranks []slotRank, mask uint64) int {
	best := -1
	for _, r := range ranks {
		if r.bit&mask != 0 && (best < 0 || r.rank < best) {
			best = r.rank
		}
	}
	return max(best, 0)
}
