package main

import (
	"math"
	"sync"
	"time"
)

// reqProgress is one request as far as it has got: its start, and its
// time to first token and end once they happened (−1 before), in seconds
// from the run's start.
type reqProgress struct {
	Start, TTFT, End float64
}

// progress is what a run's requests have done so far. The sending
// goroutines report to it; a watcher reads it to cut the run once nothing
// that is measured can still change (cutWhen).
type progress struct {
	mu   sync.Mutex
	reqs []reqProgress
}

func (p *progress) begin(start float64) int {
	if p == nil {
		return -1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, reqProgress{Start: start, TTFT: -1, End: -1})
	return len(p.reqs) - 1
}

func (p *progress) first(i int, ttft float64) {
	if p == nil || i < 0 {
		return
	}
	p.mu.Lock()
	p.reqs[i].TTFT = ttft
	p.mu.Unlock()
}

func (p *progress) end(i int, at float64) {
	if p == nil || i < 0 {
		return
	}
	p.mu.Lock()
	p.reqs[i].End = at
	p.mu.Unlock()
}

func (p *progress) snapshot() []reqProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]reqProgress(nil), p.reqs...)
}

// cutRule says when a run may stop before its flows are done. Zero values
// never cut.
type cutRule struct {
	// From and Until are the measured window (seconds from the run's
	// start). Once the clock is past Until and every request that started
	// before it has ended, what follows (a conversation's later turns) is
	// not measured: the run stops instead of waiting for it.
	From, Until float64
	// SLO and MaxIn judge a ramp step: once more requests of the window
	// have waited past SLO for their first token than a TTFT p90 within
	// SLO allows of MaxIn requests (an upper bound of the window's count),
	// the step has failed whatever the rest do.
	SLO   float64
	MaxIn int
}

// done reports whether the run can stop at now (seconds from its start).
func (c cutRule) done(now float64, reqs []reqProgress) bool {
	if c.Until <= 0 {
		return false
	}
	before, open, late := 0, 0, 0
	for _, r := range reqs {
		if r.Start < c.From {
			before++
			continue
		}
		if r.Start >= c.Until {
			continue
		}
		if r.End < 0 {
			open++
		}
		if c.SLO > 0 && r.waited(now) > c.SLO {
			late++
		}
	}
	if now >= c.Until && open == 0 {
		return true
	}
	if c.SLO <= 0 || c.MaxIn <= 0 {
		return false
	}
	// p90 is the ⌈0.9n⌉-th smallest of n: it exceeds the SLO once more
	// than n − ⌈0.9n⌉ values do, a bound that only grows with n. A request
	// late now stays late (its TTFT, or the wait a cut records, exceeds
	// the SLO), and requests that started before the window are not in it.
	n := c.MaxIn - before
	return late > n-int(math.Ceil(0.9*float64(n)))
}

// waited is the request's time to first token, or how long it has waited
// for one so far (until its end, if it ended without one).
func (r reqProgress) waited(now float64) float64 {
	switch {
	case r.TTFT >= 0:
		return r.TTFT
	case r.End >= 0:
		return r.End - r.Start
	default:
		return now - r.Start
	}
}

// watch asks c every tick until done closes and calls cut when the run can
// stop.
func (p *progress) watch(done <-chan struct{}, start time.Time, c cutRule, cut func()) {
	if c.Until <= 0 {
		return
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if c.done(time.Since(start).Seconds(), p.snapshot()) {
				cut()
				return
			}
		}
	}
}
