package validate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// tier15Probe is what the cache-aware probe saw of Tier 1.5.
type tier15Probe struct {
	hits   float64
	misses map[string]float64 // by reason
}

// cacheAware sends Probes requests sharing a long prefix: from the second on,
// Tier 1 (prefix index) or Tier 1.5 (KV inventory) should pick the prefill
// endpoint that already holds it.
func (w *workflow) cacheAware(ctx context.Context, res *StepResult) {
	if !w.compiled.isPD() || !w.compiled.cacheAware() {
		res.Status, res.Summary = Skip, "rule is not cache-aware (pd_cache_aware_mode / kvExactMode off)"
		return
	}
	before, err := w.scrape(ctx)
	if err != nil {
		res.Status, res.Summary = Fail, err.Error()
		return
	}
	if !before.Has(famLadder) && !before.Has(famTrieMatchCount) && !before.Has(famTier15Hits) {
		// Families without series yet are omitted: probe first, decide after.
		res.Evidence = append(res.Evidence, "no tier metric series before the probe")
	}
	prefix := sharedPrefix()
	ok := 0
	for i := 0; i < w.opts.Probes; i++ {
		r := w.send(ctx, fmt.Sprintf("%sQuestion %d: what is %d + %d?", prefix, i, i, i), false)
		if r.err == nil && r.status == 200 {
			ok++
		}
	}
	rule := Labels{labelRule: w.label}
	hits := func(s *Snapshot, tier string) float64 {
		return s.Sum(famLadder, Labels{labelRule: w.label, labelTier: tier, labelOutcome: outcomeHit})
	}
	after, err := w.awaitScrape(ctx, func(s *Snapshot) bool {
		return hits(s, tierPrefix)+hits(s, tierKVExact) > hits(before, tierPrefix)+hits(before, tierKVExact) ||
			s.Sum(famTier15Hits, rule) > before.Sum(famTier15Hits, rule)
	})
	if err != nil {
		res.Status, res.Summary = Fail, err.Error()
		return
	}
	res.Evidence = append(res.Evidence, fmt.Sprintf("%d of %d shared-prefix probes answered 200 (prefix %d bytes)", ok, w.opts.Probes, len(prefix)))
	t1 := hits(after, tierPrefix) - hits(before, tierPrefix)
	t15 := hits(after, tierKVExact) - hits(before, tierKVExact)
	if d := after.Sum(famTier15Hits, rule) - before.Sum(famTier15Hits, rule); d > t15 {
		t15 = d
	}
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
	if after.Has(famTier15Hits) || after.Has(famTier15Misses) {
		w.tier15 = &tier15Probe{hits: t15, misses: deltaBy(before, after, famTier15Misses, labelReason, rule)}
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s %+g; misses by reason: %s", famTier15Hits, t15, formatDeltas(w.tier15.misses)))
	}
	switch {
	case ok == 0:
		res.Status, res.Summary, res.Hints = Fail, "no probe answered", []Hint{HintClientHangs}
	case t1 <= 0 && t15 <= 0:
		res.Status, res.Summary = Fail, "repeated prefix produced no Tier 1 / Tier 1.5 hit"
		res.Hints = []Hint{HintKVZeroHits}
		if !w.compiled.kvExact() {
			res.Hints = nil
			res.Summary += " (check pd_cache_threshold and that the prompt key covers the shared prefix)"
		}
	case w.compiled.kvExact() && t15 <= 0:
		res.Status, res.Summary, res.Hints = Warn, fmt.Sprintf("Tier 1 moved (%+g) but Tier 1.5 KV-exact did not", t1), []Hint{HintKVZeroHits}
	default:
		res.Status, res.Summary = Pass, fmt.Sprintf("Tier 1 %+g, Tier 1.5 %+g", t1, t15)
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

	rows, found, err := w.inventory(ctx)
	blocks := 0
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
			case !r.Connected:
				worse(Fail, "subscriber to "+r.Endpoint+" disconnected", HintKVZeroHits)
			case !r.Trusted:
				worse(Warn, fmt.Sprintf("%s rank %d not trusted (%s)", r.Endpoint, r.Rank, r.Reason), HintKVZeroHits)
			}
		}
		if blocks == 0 {
			worse(Warn, "inventory is empty (no KV events indexed)", HintKVZeroHits)
		}
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
	if w.tier15 != nil && blocks > 0 && w.tier15.hits <= 0 {
		res.Evidence = append(res.Evidence, "Tier 1.5 misses during the shared-prefix probe: "+formatDeltas(w.tier15.misses))
		worse(Warn, fmt.Sprintf("the inventory holds %d blocks but the repeated prefix never hit Tier 1.5: %s", blocks, parity), HintKVZeroHits)
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
}

// inventory returns the rule's inventory rows (found=false: no such API).
func (w *workflow) inventory(ctx context.Context) ([]inventoryRow, bool, error) {
	var doc struct {
		Rows []inventoryRow `json:"rows"`
	}
	found, err := getJSON(ctx, w.hc, strings.TrimRight(w.opts.Server, "/")+pathKVInventory, &doc)
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
