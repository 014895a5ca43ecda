package validate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

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
	if after.Has(famTier15Hits) {
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s %+g", famTier15Hits, t15))
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

// kvExact checks the event feed and the inventory of a KV-exact rule.
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
	if now.Has(famKVConnected) {
		conn := now.By(famKVConnected, labelEndpoint, rule)
		res.Evidence = append(res.Evidence, famKVConnected+": "+formatDeltas(conn))
		for ep, v := range conn {
			if v < 1 {
				worse(Fail, "subscriber to "+ep+" disconnected", HintKVZeroHits)
			}
		}
		if len(conn) == 0 {
			worse(Fail, "no subscriber series for the rule", HintKVZeroHits)
		}
	} else {
		worse(Warn, "subscriber family not exported")
	}
	blocks := now.By(famKVBlocks, labelEndpoint, rule)
	res.Evidence = append(res.Evidence, famKVBlocks+": "+formatDeltas(blocks))
	total := 0.0
	for _, v := range blocks {
		total += v
	}
	if total == 0 {
		worse(Warn, "no blocks indexed", HintKVZeroHits)
	}
	if mm := now.Sum(famKVBlockMismatch, rule); mm > 0 {
		worse(Warn, fmt.Sprintf("%g events with a block_size other than kvBlockSize %d: engine and rule disagree (parity)", mm, w.compiled.KV.BlockSize), HintKVZeroHits)
	}
	if now.Has(famKVWatchdog) {
		wd := now.Sum(famKVWatchdog, rule)
		moved := wd - w.before.Sum(famKVWatchdog, rule)
		res.Evidence = append(res.Evidence, fmt.Sprintf("%s %g (%+g during validation)", famKVWatchdog, wd, moved))
		if moved > 0 {
			worse(Fail, "zero-hit watchdog fired during validation", HintKVZeroHits)
		} else if wd > 0 {
			worse(Warn, "zero-hit watchdog fired earlier", HintKVZeroHits)
		}
	}
	inv, found, err := w.inventory(ctx)
	switch {
	case err != nil:
		worse(Warn, "inventory API: "+err.Error())
	case !found:
		worse(Warn, "inventory API not available ("+pathKVInventory+")")
	default:
		res.Evidence = append(res.Evidence, "inventory: "+inv.String())
		if inv.untrusted > 0 {
			worse(Warn, fmt.Sprintf("%d inventory entries not trusted yet (warm-up or sequence gap)", inv.untrusted), HintKVZeroHits)
		}
		if inv.blocks == 0 {
			worse(Warn, "inventory is empty", HintKVZeroHits)
		}
	}
	res.Status = status
	if len(notes) == 0 {
		res.Summary = fmt.Sprintf("subscribers connected, %g blocks indexed, watchdog quiet", total)
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

// inventorySummary is what the workflow learns from the inventory API,
// read tolerantly: any "trusted" booleans and "blocks" numbers under the
// rule's entry (or the whole document when no entry names the rule).
type inventorySummary struct {
	entries, untrusted int
	blocks             float64
}

func (s inventorySummary) String() string {
	return fmt.Sprintf("%d entries, %d untrusted, %g blocks", s.entries, s.untrusted, s.blocks)
}

// Inventory wire field names.
const (
	fieldTrusted = "trusted"
	fieldBlocks  = "blocks"
	fieldRule    = "rule"
	fieldName    = "name"
)

func (w *workflow) inventory(ctx context.Context) (inventorySummary, bool, error) {
	var doc any
	found, err := getJSON(ctx, w.hc, strings.TrimRight(w.opts.Server, "/")+pathKVInventory, &doc)
	if err != nil || !found {
		return inventorySummary{}, found, err
	}
	if sub := findRuleEntry(doc, w.label); sub != nil {
		doc = sub
	}
	var s inventorySummary
	walkInventory(doc, &s)
	return s, true, nil
}

func findRuleEntry(v any, label string) any {
	switch x := v.(type) {
	case map[string]any:
		if x[fieldRule] == label || x[fieldName] == label {
			return x
		}
		if sub, ok := x[label]; ok {
			return sub
		}
		for _, c := range x {
			if f := findRuleEntry(c, label); f != nil {
				return f
			}
		}
	case []any:
		for _, c := range x {
			if f := findRuleEntry(c, label); f != nil {
				return f
			}
		}
	}
	return nil
}

func walkInventory(v any, s *inventorySummary) {
	switch x := v.(type) {
	case map[string]any:
		if t, ok := x[fieldTrusted].(bool); ok {
			s.entries++
			if !t {
				s.untrusted++
			}
		}
		if b, ok := x[fieldBlocks].(float64); ok {
			s.blocks += b
		}
		for k, c := range x {
			if k != fieldBlocks {
				walkInventory(c, s)
			}
		}
	case []any:
		for _, c := range x {
			walkInventory(c, s)
		}
	}
}
