package validate

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// tier15Result is what the Tier 1.5 probe saw.
type tier15Result struct {
	hits     float64
	misses   map[string]float64 // by reason
	evidence []string
	// refused is the engine's first 4xx answer to a probe ("" if none):
	// the cause to report instead of a KV parity guess.
	refused string
	// skipped says why no probe was sent ("" when it ran).
	skipped string
}

// Tier 1.5 probe sizing: prompts of tier15PromptBytes whose shared head is
// half the Tier 1 threshold's share, so Tier 1 misses (below_threshold) and
// Tier 1.5 is asked; the head still spans several KV blocks.
//
// A byte-level BPE turns ASCII text into at most one token per byte, so a
// prompt of n bytes never exceeds n tokens: with the engines'
// max_model_len known, prompts are cut to fit it (minus the answer and a
// slack for BOS and templates). The shared head spans tier15MinBlocks KV
// blocks at a pessimistic tier15BytesPerToken.
const (
	// sourceBind is the inventory row source of the bind topology.
	sourceBind = "zmq_bind"

	tier15PromptBytes   = 8192
	tier15MinBlocks     = 4
	tier15BytesPerToken = 4
	tier15ContextSlack  = 32
)

// tier15Size returns the probe's prompt bytes and minimum head bytes for
// block size bs and context maxLen (0: unknown), or ok=false when the
// context cannot hold a useful probe.
func tier15Size(bs, maxLen int) (promptBytes, minHead int, ok bool) {
	promptBytes = tier15PromptBytes
	if maxLen > 0 {
		promptBytes = min(promptBytes, maxLen-probeTokens-tier15ContextSlack)
	}
	minHead = tier15MinBlocks * bs * tier15BytesPerToken
	return promptBytes, minHead, promptBytes >= minHead+minHead/2 // room for distinct tails
}

// tier15Probe sends one request that stores a shared head in a prefill's
// KV cache (the engine publishes it), waits for the inventory to grow, then
// Probes-1 requests with the same head and different tails: each should be
// a Tier 1.5 hit.
func (w *workflow) tier15Probe(ctx context.Context) tier15Result {
	bs := max(w.compiled.KV.BlockSize, 1)
	threshold := 0
	if w.compiled.PD != nil && w.compiled.PD.CacheAware {
		threshold = w.compiled.PD.CacheThreshold
	}
	promptBytes, minHead, fits := tier15Size(bs, w.maxModelLen)
	if !fits {
		why := fmt.Sprintf("max_model_len %d cannot hold a %d-block probe of kvBlockSize %d", w.maxModelLen, tier15MinBlocks, bs)
		return tier15Result{skipped: why, evidence: []string{"Tier 1.5 probe not run: " + why}}
	}
	headBytes := max(promptBytes*threshold/200, minHead)
	nonce := time.Now().UnixNano()
	var head strings.Builder
	for i := 0; head.Len() < headBytes; i++ {
		fmt.Fprintf(&head, "kv%x-%d ", nonce, i)
	}
	tail := func(n int) string {
		var b strings.Builder
		for i := 0; ; i++ {
			word := fmt.Sprintf("t%d-%d ", n, i)
			if b.Len()+head.Len()+len(word) > promptBytes {
				return b.String()
			}
			b.WriteString(word)
		}
	}
	rule := Labels{labelRule: w.label}
	blocks := func(s *Snapshot) float64 { return s.Sum(famKVBlocks, rule) }
	before, err := w.scrape(ctx)
	if err != nil {
		return tier15Result{evidence: []string{"Tier 1.5 probe: " + err.Error()}}
	}
	var refused string
	noteRefusal := func(r probeResult) {
		if refused == "" && r.err == nil && r.status >= 400 && r.status < 500 {
			refused = fmt.Sprintf("%d%s", r.status, bodyExcerpt(r.body))
		}
	}
	first := w.send(ctx, head.String()+tail(0), false)
	noteRefusal(first)
	_, _ = w.awaitScrape(ctx, func(s *Snapshot) bool { return blocks(s) > blocks(before) })
	mid, err := w.scrape(ctx)
	if err != nil {
		return tier15Result{evidence: []string{"Tier 1.5 probe: " + err.Error()}}
	}
	ok := 0
	for i := 1; i < w.opts.Probes; i++ {
		r := w.send(ctx, head.String()+tail(i), false)
		if r.err == nil && r.status == 200 {
			ok++
		}
		noteRefusal(r)
	}
	want := float64(w.opts.Probes - 1)
	after, err := w.awaitScrape(ctx, func(s *Snapshot) bool {
		return s.Sum(famTier15Hits, rule)-mid.Sum(famTier15Hits, rule) >= want
	})
	if err != nil {
		return tier15Result{evidence: []string{"Tier 1.5 probe: " + err.Error()}}
	}
	res := tier15Result{
		hits:    after.Sum(famTier15Hits, rule) - mid.Sum(famTier15Hits, rule),
		misses:  deltaBy(mid, after, famTier15Misses, labelReason, rule),
		refused: refused,
	}
	ctxNote := "max_model_len unknown"
	if w.maxModelLen > 0 {
		ctxNote = fmt.Sprintf("max_model_len %d", w.maxModelLen)
	}
	res.evidence = append(res.evidence,
		fmt.Sprintf("Tier 1.5 probe: %d-byte prompts (%s, kvBlockSize %d); seed request %d, inventory blocks %+g after it; %d of %d repeats of a %d-byte head (Tier 1 threshold %d%%) answered 200",
			promptBytes, ctxNote, bs, first.status, blocks(mid)-blocks(before), ok, w.opts.Probes-1, head.Len(), threshold),
		fmt.Sprintf("%s %+g; %s by reason: %s", famTier15Hits, res.hits, famTier15Misses, formatDeltas(res.misses)))
	return res
}

// cacheAware is Tier 1: Probes requests sharing a long prefix; from the
// second on, the prefix index should pick the prefill that served it.
// Tier 1.5 is probed by the KV-exact step (it only runs when Tier 1 misses).
func (w *workflow) cacheAware(ctx context.Context, res *StepResult) {
	if !w.compiled.isPD() || w.compiled.PD == nil || !w.compiled.PD.CacheAware {
		res.Status, res.Summary = Skip, "rule has no Tier 1 prefix affinity (pd_cache_aware_mode off)"
		return
	}
	before, err := w.scrape(ctx)
	if err != nil {
		res.Status, res.Summary = Fail, err.Error()
		return
	}
	prefix := sharedPrefix(w.maxModelLen)
	ok := 0
	for i := 0; i < w.opts.Probes; i++ {
		r := w.send(ctx, fmt.Sprintf("%sQuestion %d: what is %d + %d?", prefix, i, i, i), false)
		if r.err == nil && r.status == 200 {
			ok++
		}
	}
	rule := Labels{labelRule: w.label}
	hits := func(s *Snapshot) float64 {
		return s.Sum(famLadder, Labels{labelRule: w.label, labelTier: tierPrefix, labelOutcome: outcomeHit})
	}
	after, err := w.awaitScrape(ctx, func(s *Snapshot) bool {
		return hits(s)-hits(before) >= float64(w.opts.Probes-1) ||
			s.Sum(famTrieMatchSum, rule) > before.Sum(famTrieMatchSum, rule)
	})
	if err != nil {
		res.Status, res.Summary = Fail, err.Error()
		return
	}
	res.Evidence = append(res.Evidence, fmt.Sprintf("%d of %d shared-prefix probes answered 200 (prefix %d bytes)", ok, w.opts.Probes, len(prefix)))
	t1 := hits(after) - hits(before)
	switch {
	case after.Has(famLadder):
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s{outcome=hit} by tier: %s", famLadder,
			formatDeltas(deltaBy(before, after, famLadder, labelTier, Labels{labelRule: w.label, labelOutcome: outcomeHit}))))
	case after.Has(famTrieMatchCount):
		n := after.Sum(famTrieMatchCount, rule) - before.Sum(famTrieMatchCount, rule)
		sum := after.Sum(famTrieMatchSum, rule) - before.Sum(famTrieMatchSum, rule)
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s %+g lookups, match-rate sum %+.2f (ladder family %s not exported)", famTrieMatchCount, n, sum, famLadder))
		if sum > 0 {
			t1 = sum // a positive match rate is a Tier-1 prefix match
		}
	default:
		res.Status, res.Summary = Skip, "the gateway exports no tier metrics ("+famLadder+", "+famTrieMatchCount+")"
		return
	}
	switch {
	case ok == 0:
		res.Status, res.Summary, res.Hints = Fail, "no probe answered", []Hint{HintClientHangs}
	case t1 <= 0:
		res.Status, res.Summary = Fail, "the repeated prefix produced no Tier 1 hit (check pd_cache_threshold and pd_balance_abs_threshold)"
		res.Hints = []Hint{HintRoleOverloaded}
	default:
		res.Status, res.Summary = Pass, fmt.Sprintf("Tier 1 prefix hits %+.3g for %d repeats", t1, w.opts.Probes-1)
	}
}

// kvExact checks the event feed and the inventory of a KV-exact rule:
// subscribers connected (FAIL otherwise), inventory trusted and non-empty,
// the zero-hit watchdog quiet and, when the cache-aware probe ran, Tier 1.5
// hitting on a prefix the inventory holds. A populated, trusted inventory
// that never hits is a parity problem (block size, hash, tokenizer): WARN
// with that hint, since the rule still serves through Tier 1 and Tier 2.
func (w *workflow) kvExact(ctx context.Context, res *StepResult) {
	if !w.compiled.kvExact() {
		res.Status, res.Summary = Skip, "rule has no kvExactMode"
		return
	}
	now, err := w.scrape(ctx)
	if err != nil {
		res.Status, res.Summary = Fail, err.Error()
		return
	}
	rule := Labels{labelRule: w.label}
	status := Pass
	var notes []string
	worse := func(s Status, note string, hs ...Hint) {
		if rank(s) > rank(status) {
			status = s
		}
		notes = append(notes, note)
		res.Hints = appendHint(res.Hints, hs...)
	}
	parity := fmt.Sprintf("kvBlockSize %d must equal the engines' --block-size, kvHashAlgo %q their hash, and the tokenizer/model theirs",
		w.compiled.KV.BlockSize, w.compiled.KV.HashAlgo)

	rows, found, err := w.awaitTrust(ctx)
	blocks, trusted := 0, 0
	switch {
	case err != nil:
		worse(Warn, "inventory API: "+err.Error())
	case !found:
		worse(Warn, "inventory API not available ("+pathKVInventory+")")
	case len(rows) == 0:
		worse(Fail, "the inventory lists no endpoint for the rule", HintKVZeroHits)
	default:
		for _, r := range rows {
			blocks += r.Blocks
			ev := fmt.Sprintf("inventory %s rank %d (%s): %d blocks, connected %v, trusted %v", r.Endpoint, r.Rank, r.Source, r.Blocks, r.Connected, r.Trusted)
			if r.Reason != "" {
				ev += " (" + r.Reason + ")"
			}
			res.Evidence = append(res.Evidence, ev)
			switch {
			case !r.Connected && r.Source == sourceBind && r.Trusted:
				// The bind topology has no connection: "connected" is a
				// recent event, and an engine serving only hits is quiet.
				trusted++
			case !r.Connected && r.Source == sourceBind:
				worse(Warn, fmt.Sprintf("no KV event from %s rank %d recently (%s)", r.Endpoint, r.Rank, r.Reason), HintKVZeroHits)
			case !r.Connected:
				worse(Fail, "subscriber to "+r.Endpoint+" disconnected", HintKVZeroHits)
			case !r.Trusted:
				worse(Warn, fmt.Sprintf("%s rank %d not trusted (%s)", r.Endpoint, r.Rank, r.Reason), HintKVZeroHits)
			default:
				trusted++
			}
		}
		if blocks == 0 {
			worse(Warn, "inventory is empty (no KV events indexed)", HintKVZeroHits)
		}
		w.blockSizeParity(rows, worse, parity)
	}
	if !found && now.Has(famKVConnected) {
		for ep, v := range now.By(famKVConnected, labelEndpoint, rule) {
			if v < 1 {
				worse(Fail, "subscriber to "+ep+" disconnected", HintKVZeroHits)
			}
		}
	}
	if mm := now.Sum(famKVBlockMismatch, rule); mm > 0 {
		worse(Warn, fmt.Sprintf("%g events with another block_size than the first (engines disagree): %s", mm, parity), HintKVZeroHits)
	}
	if now.Has(famKVWatchdog) {
		wd := now.Sum(famKVWatchdog, rule)
		moved := wd - w.before.Sum(famKVWatchdog, rule)
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s %g (%+g during validation)", famKVWatchdog, wd, moved))
		if wd > 0 {
			worse(Warn, "zero-hit watchdog fired: "+parity, HintKVZeroHits)
		}
	}
	switch {
	case trusted == 0:
		res.Evidence = append(res.Evidence, "Tier 1.5 probe not run: no trusted inventory rank (rerun after kvWarmupSec)")
	case ctx.Err() == nil:
		t15 := w.tier15Probe(ctx)
		w.tier15 = &t15
		res.Evidence = append(res.Evidence, t15.evidence...)
		after, _ := w.inventory(ctx)
		blocksAfter := 0
		for _, r := range after {
			blocksAfter += r.Blocks
		}
		if !w.blockSizeWarned {
			w.blockSizeParity(after, worse, parity)
		}
		switch {
		case t15.skipped != "":
			worse(Warn, "Tier 1.5 probe not run: "+t15.skipped, HintEngineRefused)
		case t15.refused != "":
			// The engine said why; that, not the KV parity, is the cause.
			worse(Warn, "the engine refused the Tier 1.5 probe ("+t15.refused+")", HintEngineRefused)
		case t15.hits <= 0 && blocksAfter > 0:
			worse(Warn, fmt.Sprintf("the inventory holds %d blocks but a repeated prefix never hit Tier 1.5: %s", blocksAfter, parity), HintKVZeroHits)
		}
	}
	res.Status = status
	if len(notes) == 0 {
		res.Summary = fmt.Sprintf("subscribers connected, %d blocks indexed and trusted, watchdog quiet", blocks)
		if w.tier15 != nil {
			res.Summary += fmt.Sprintf(", Tier 1.5 %+g hits", w.tier15.hits)
		}
	} else {
		res.Summary = strings.Join(notes, "; ")
	}
}

// blockSizeParity warns when the engines publish blocks of another size
// than the rule's kvBlockSize. infergate keys with the learned size, so
// Tier 1.5 may still hit, but the rule is wrong (and a fresh inventory, a
// restarted gateway or a TensorRT-LLM admission check goes by it).
func (w *workflow) blockSizeParity(rows []inventoryRow, worse func(Status, string, ...Hint), parity string) {
	for _, r := range rows {
		if r.BlockSize > 0 && w.compiled.KV.BlockSize > 0 && r.BlockSize != w.compiled.KV.BlockSize {
			w.blockSizeWarned = true
			worse(Warn, fmt.Sprintf("engines publish %d-token blocks but the rule's kvBlockSize is %d: %s",
				r.BlockSize, w.compiled.KV.BlockSize, parity), HintKVZeroHits)
			return
		}
	}
}

func rank(s Status) int {
	switch s {
	case Fail:
		return 3
	case Warn:
		return 2
	case Pass:
		return 1
	}
	return 0
}

// inventoryRow is one row of GET /netlox/v1/config/ai/kv/inventory.
type inventoryRow struct {
	Rule      string `json:"rule"`
	Endpoint  string `json:"endpoint"`
	Rank      int    `json:"rank"`
	Source    string `json:"source"`
	Blocks    int    `json:"blocks"`
	Connected bool   `json:"connected"`
	Trusted   bool   `json:"trusted"`
	Reason    string `json:"untrusted_reason"`
	// BlockSize is what the inventory keys with (learned from events); 0
	// from a gateway that does not report it.
	BlockSize int `json:"block_size"`
}

// awaitTrust reads the inventory, waiting while connected ranks are only in
// their warm-up (a rule validated right after it was applied): up to the
// rule's kvWarmupSec plus a second, at most KVWarmupWait.
func (w *workflow) awaitTrust(ctx context.Context) ([]inventoryRow, bool, error) {
	wait := time.Duration(w.compiled.KV.WarmupSec*float64(time.Second)) + time.Second
	wait = min(wait, w.opts.KVWarmupWait)
	deadline := time.Now().Add(wait)
	for {
		rows, found, err := w.inventoryFound(ctx)
		warming := false
		for _, r := range rows {
			warming = warming || (r.Connected && !r.Trusted && r.Reason == reasonWarmup)
		}
		if err != nil || !found || !warming || time.Now().After(deadline) {
			return rows, found, err
		}
		select {
		case <-ctx.Done():
			return rows, found, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// reasonWarmup is the inventory's untrusted_reason during warm-up.
const reasonWarmup = "warmup"

// inventory returns the rule's inventory rows (nil on any error).
func (w *workflow) inventory(ctx context.Context) ([]inventoryRow, error) {
	rows, _, err := w.inventoryFound(ctx)
	return rows, err
}

// inventoryFound returns the rule's inventory rows (found=false: no such API).
func (w *workflow) inventoryFound(ctx context.Context) ([]inventoryRow, bool, error) {
	var doc struct {
		Rows []inventoryRow `json:"rows"`
	}
	found, err := getJSON(ctx, w.apiHC, strings.TrimRight(w.opts.Server, "/")+pathKVInventory, &doc)
	if err != nil || !found {
		return nil, found, err
	}
	var out []inventoryRow
	for _, r := range doc.Rows {
		if r.Rule == w.label {
			out = append(out, r)
		}
	}
	return out, true, nil
}
