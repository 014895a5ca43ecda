package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

type pcts struct{ P50, P90, P99 float64 }

// runSummary is one (workload, load, arm) run.
type runSummary struct {
	Workload, Arm string
	Load, Rate    float64 // fraction of capacity, requests/s offered
	Elapsed       float64
	// Warm and Window are the measured window, [Warm, Warm+Window) seconds
	// from the run's start; Covered says every group of the workload was
	// sent during the warm-up (always true for workloads without groups).
	Warm, Window float64
	Covered      bool
	// SameAs names the workload whose run this is (bench.sameRun): the
	// same arrivals, and an arm that reads no header telling them apart.
	SameAs        string `json:",omitempty"`
	N, OK, Errors int
	// Unanswered counts requests without a first token when the run was
	// cut; their TTFT enters the percentiles as the time they waited (a
	// lower bound), so an overloaded arm is not flattered by dropping them.
	Unanswered int
	// Lost counts answered requests whose engine held at least a block
	// less of the prompt than an ample pinned cache would have (affinity
	// lost to a guard, a pile-up or churn); LostTTFT is their TTFT p50.
	Lost     int
	LostTTFT float64
	// Kept counts the other answered requests (their engine held what an
	// ample pinned cache would) and KeptTTFT is their TTFT: arms that cache
	// alike are compared on it, where a p50 over every request moves with
	// how many an arm lost. TTFTMean is the mean over every request (as
	// the percentiles): it weighs each lost request's prefill, which the
	// p50 ignores while under half are lost.
	Kept     int
	KeptTTFT pcts
	TTFTMean float64
	// FollowTTFT is the TTFT of a conversation's later turns (multi-turn):
	// the first turns are misses in every arm and blur the overall p50.
	FollowTTFT pcts
	Follow     int
	// FirstSight counts answered requests no earlier request of the run
	// shared a block with (the computed ideal cache held nothing: every
	// router computes the whole prompt); FirstSightWorst is their longest
	// TTFT and SeenTTFT the TTFT of the other answered requests, the tail
	// a router is answerable for.
	FirstSight      int
	FirstSightWorst float64
	SeenTTFT        pcts
	Seen            int
	// Tail explains the requests at or above the TTFT p99 (tailNotes).
	Tail             []string `json:",omitempty"`
	TTFT             pcts
	ITL              pcts
	E2E              pcts
	Goodput          float64 // requests/s within both SLOs
	HitRate          float64 // Σ Δhits / Σ Δqueries over the engines
	IdealHitRate     float64 // computed: one ample cache per group
	ClientHit        float64 // Σ cached / Σ prompt tokens from usage
	Served           []float64
	RunningMean      []float64 // per engine, time-averaged
	Imbalance        float64   // max / mean of (running + waiting)
	MaxWaiting       float64
	CPUPerReqMs      float64 // gateway CPU per request it answered, net of its idle burn
	CPUGrossPerReqMs float64
	GatewayAnswered  int    // requests the gateway answered over the CPU read (cpuratio.go)
	Gateway          series `json:",omitempty"`
	FirstErr         string `json:",omitempty"`
}

func percentiles(v []float64) pcts {
	if len(v) == 0 {
		return pcts{} // JSON has no NaN; counts say whether there was data
	}
	sort.Float64s(v)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return v[max(0, min(i, len(v)-1))]
	}
	return pcts{at(0.5), at(0.9), at(0.99)}
}

func summarise(res []*result, window time.Duration, cfg config) *runSummary {
	s := &runSummary{N: len(res)}
	var ttft, itl, e2e []float64
	var prompt, cached, ideal, idealOf float64
	good := 0
	var lost, kept, follow, seen []float64
	for _, r := range res {
		if r.Turn > 0 && r.TTFT >= 0 {
			follow = append(follow, r.TTFT)
		}
		switch {
		case r.TTFT < 0:
		case r.firstSight():
			s.FirstSight++
			s.FirstSightWorst = max(s.FirstSightWorst, r.TTFT)
		default:
			seen = append(seen, r.TTFT)
		}
		if r.ok() && r.lostAffinity() {
			lost = append(lost, r.TTFT)
		} else if r.ok() {
			kept = append(kept, r.TTFT)
		}
		switch {
		case r.ok():
			s.OK++
		case r.TTFT < 0:
			s.Unanswered++
			if s.FirstErr == "" {
				s.FirstErr = r.Err
			}
		default:
			s.Errors++
			if s.FirstErr == "" {
				s.FirstErr = r.Err
			}
		}
		if r.TTFT >= 0 {
			ttft = append(ttft, r.TTFT)
		} else {
			ttft = append(ttft, r.E2E)
		}
		itl = append(itl, r.itl...)
		if r.ok() {
			e2e = append(e2e, r.E2E)
			if r.TTFT <= cfg.ttftSLO.Seconds() && r.ITLMean <= cfg.itlSLO.Seconds() {
				good++
			}
		}
		prompt += float64(r.Prompt)
		cached += float64(r.Cached)
		ideal += float64(r.IdealHit)
		idealOf += float64(r.IdealOf)
	}
	if len(ttft) > 0 {
		sum := 0.0
		for _, v := range ttft {
			sum += v
		}
		s.TTFTMean = sum / float64(len(ttft))
	}
	s.TTFT, s.ITL, s.E2E = percentiles(ttft), percentiles(itl), percentiles(e2e)
	s.Lost, s.LostTTFT = len(lost), percentiles(lost).P50
	s.Kept, s.KeptTTFT = len(kept), percentiles(kept)
	s.Follow, s.FollowTTFT = len(follow), percentiles(follow)
	s.Seen, s.SeenTTFT = len(seen), percentiles(seen)
	s.Goodput = float64(good) / window.Seconds()
	if prompt > 0 {
		s.ClientHit = cached / prompt
	}
	if idealOf > 0 {
		s.IdealHitRate = ideal / idealOf
	}
	return s
}

func (s *runSummary) spread(l *loadSampler) {
	if l == nil || l.samples == 0 {
		return
	}
	var sum, hi float64
	for i := range l.running {
		m := l.running[i] / float64(l.samples)
		s.RunningMean = append(s.RunningMean, m)
		w := (l.running[i] + l.waiting[i]) / float64(l.samples)
		sum += w
		hi = max(hi, w)
	}
	if sum > 0 {
		s.Imbalance = hi / (sum / float64(len(l.running)))
	}
	s.MaxWaiting = l.maxWaiting
}

func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// table prints one workload's runs with ratios against rr at the same load.
func (b *bench) table(name string, capacity float64, rows []*runSummary) {
	w := b.report
	fmt.Fprintf(w, "\n## %s (capacity %.1f req/s, see the ramp above; TTFT SLO %v, ITL SLO %v; ratios against %s)\n",
		name, capacity, b.cfg.ttftSLO, b.cfg.itlSLO, b.baseArm)
	fmt.Fprintf(w, "%-5s %-9s %5s %4s %4s | %7s %7s %7s | %6s %6s | %7s | %5s %5s %5s | %5s %7s | %8s %8s %7s %8s\n",
		"load", "arm", "req/s", "n", "err", "TTFTp50", "TTFTp90", "TTFTp99", "ITLp50", "ITLp99", "goodput", "hit", "c.hit", "ideal",
		"imbal", "cpu/rq", "p50/base", "p99/base", "hit/idl", "cpu/base")
	byLoad := map[float64]*runSummary{}
	for _, r := range rows {
		if r.Arm == b.baseArm {
			byLoad[r.Load] = r
		}
	}
	for _, r := range rows {
		rr := byLoad[r.Load]
		if rr == nil {
			rr = &runSummary{TTFT: pcts{math.NaN(), math.NaN(), math.NaN()}}
		}
		cpu, cpuR := "—", "—"
		if r.Arm != armIdeal {
			cpu = fmt.Sprintf("%.2fms", r.CPUPerReqMs)
			// A reused base row (sameRun) ran beside another workload's
			// runs: CPU compares adjacent runs only (cpuPairs).
			if rr.SameAs == "" || r == rr {
				cpuR = ratio(r.CPUPerReqMs, rr.CPUPerReqMs)
			}
		}
		fmt.Fprintf(w, "%4.0f%% %-9s %5.1f %4d %4d | %7.3f %7.3f %7.3f | %6.1f %6.1f | %7.2f | %5.3f %5.3f %5.3f | %5.2f %7s | %8s %8s %7s %8s\n",
			r.Load*100, r.Arm, r.Rate, r.N, r.Errors+r.Unanswered, r.TTFT.P50, r.TTFT.P90, r.TTFT.P99, r.ITL.P50*1000, r.ITL.P99*1000,
			r.Goodput, r.HitRate, r.ClientHit, r.IdealHitRate, r.Imbalance, cpu,
			ratio(r.TTFT.P50, rr.TTFT.P50), ratio(r.TTFT.P99, rr.TTFT.P99), ratio(r.ClientHit, r.IdealHitRate), cpuR)
	}
	for _, r := range rows {
		if r.Follow > 0 {
			rr := byLoad[r.Load]
			base := math.NaN()
			if rr != nil {
				base = rr.FollowTTFT.P50
			}
			fmt.Fprintf(w, "  follow-up turns %4.0f%% %-9s n=%d TTFT p50 %.3f p90 %.3f p99 %.3f (p50 %s of %s's)\n",
				r.Load*100, r.Arm, r.Follow, r.FollowTTFT.P50, r.FollowTTFT.P90, r.FollowTTFT.P99, ratio(r.FollowTTFT.P50, base), b.baseArm)
		}
	}
	for _, r := range rows {
		if r.SameAs != "" {
			fmt.Fprintf(w, "  %4.0f%% %-9s the %s run's row, not run again (same arrivals; %s reads no X-Conversation-Id); no cpu/base against it\n",
				r.Load*100, r.Arm, r.SameAs, r.Arm)
		}
	}
	b.firstSight(rows)
	for _, r := range rows {
		if r.Lost > 0 {
			fmt.Fprintf(w, "  affinity %4.0f%% %-9s %d of %d answered requests found ≥ 1 block less cached than a pinned ample cache would hold (their TTFT p50 %.3fs)\n",
				r.Load*100, r.Arm, r.Lost, r.OK, r.LostTTFT)
		}
	}
	for _, r := range rows {
		if d := gatewayDiag(r.Gateway); d != "" {
			fmt.Fprintf(w, "  gateway %4.0f%% %-7s %s\n", r.Load*100, r.Arm, d)
		}
		if r.FirstErr != "" {
			fmt.Fprintf(w, "  first error %4.0f%% %-7s %s\n", r.Load*100, r.Arm, r.FirstErr)
		}
	}
	fmt.Fprintln(w, "  (TTFT/ITL in s/ms; hit = engines' Σhits/Σqueries over the window; c.hit = cached/prompt tokens of the measured requests (usage);"+
		" ideal = computed for the same requests, one ample pinned cache; hit/idl = c.hit/ideal; imbal = busiest engine's mean queue / fleet mean;"+
		" cpu/rq = gateway CPU per request it answered over the window and drain, net of its idle burn)")
}

// firstSight prints each run's window and splits its measured requests
// into first sight and the rest (runSummary.FirstSight): a short window
// holds few requests, so one first-sight prefill (≈ 0.6 s for 2,200
// tokens) is its p99, and the seen requests' p99 is the tail a router is
// answerable for.
func (b *bench) firstSight(rows []*runSummary) {
	base := map[float64]pcts{}
	for _, r := range rows {
		if r.Arm == b.baseArm {
			base[r.Load] = r.SeenTTFT
		}
	}
	fmt.Fprintln(b.report, "  TTFT of requests whose prefix was seen before in the run (first-sight requests apart):")
	for _, r := range rows {
		cover := ""
		if !r.Covered {
			cover = ", warm-up cut at its bound before every group was sent"
		}
		fmt.Fprintf(b.report, "  %4.0f%% %-9s window %.1f–%.1f s%s | seen n=%-3d p50 %.3f p99 %.3f (%s of %s's) | first sight n=%d, worst %.3f s\n",
			r.Load*100, r.Arm, r.Warm, r.Warm+r.Window, cover, r.Seen, r.SeenTTFT.P50, r.SeenTTFT.P99, ratio(r.SeenTTFT.P99, base[r.Load].P99), b.baseArm,
			r.FirstSight, r.FirstSightWorst)
	}
	for _, r := range rows {
		for _, t := range r.Tail {
			fmt.Fprintf(b.report, "  tail %4.0f%% %-9s %s\n", r.Load*100, r.Arm, t)
		}
	}
}

// gatewayDiag condenses the routing metrics of one run: ladder outcomes by
// tier and reason, CHWBL skips, local tokenisation results.
func gatewayDiag(g series) string {
	if len(g) == 0 {
		return ""
	}
	agg := map[string]float64{}
	for k, v := range g {
		name, labels, _ := strings.Cut(k, "{")
		switch {
		case strings.HasPrefix(name, "infergate_ladder_decisions_total"):
			agg["ladder "+pick(labels, "tier")+"/"+pick(labels, "outcome")+"/"+pick(labels, "reason")] += v
		case strings.HasPrefix(name, "infergate_chwbl_bound_skips_total"):
			agg["chwbl bound_skips"] += v
		case strings.HasPrefix(name, "infergate_chwbl_picks_total"):
			agg["chwbl picks/"+pick(labels, "source")] += v
		case strings.HasPrefix(name, "loxilb_kv_local_tokenize_total"):
			agg["tokenize/"+pick(labels, "result")] += v
		case strings.HasPrefix(name, "loxilb_pd_kv_tier15_hits_total"):
			agg["kv hit"] += v
		case strings.HasPrefix(name, "loxilb_pd_kv_tier15_misses_total"):
			agg["kv fallthrough/"+pick(labels, "reason")] += v
		case strings.HasPrefix(name, "loxilb_pd_kv_zero_hit_watchdog_total"):
			agg["zero_hit_watchdog"] += v
		}
	}
	keys := make([]string, 0, len(agg))
	for k := range agg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.0f", k, agg[k]))
	}
	return strings.Join(parts, " ")
}

// pick returns a label's value from a `a="x",b="y"}` label string.
func pick(labels, name string) string {
	i := strings.Index(labels, name+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(name)+2:]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}
