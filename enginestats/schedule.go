package enginestats

import (
	"slices"
	"time"
)

// burst is the most scrapes one wake-up of the scheduler starts. Up to
// burst distinct scrapes (share.go) all run together once per interval; more are
// split into ceil(n/burst) bursts spread over the interval, so the CPU
// of one burst (about 3 ms for 64 targets: 64 times the ~40 µs a scrape
// costs in TestScrapeCost) never delays the request path by more.
// A shared scrape also publishes to every rule naming it: 2,000 rules on
// one scrape took 0.38–0.54 % of a core (TestScrapeCostShared), about 1 ms
// per interval; how it splits between the scrape and the publish was not
// measured.
//
// Why bursts and not a timer per target: on the hosts measured, waking
// an idle Go process costs as much CPU as several scrapes (the runtime
// wakes a second thread, spins, parks both again), so 64 targets on
// their own timers cost 256 wake-ups a second where one burst per
// interval costs 4 (TestScrapeCost: 6–9 % of a core before, see doc.go
// for after). The jitter still varies every pause, so scrapes do not beat
// with an engine's own periodic work; the engines, each scraped once per
// burst, do not care that their neighbours are scraped in the same
// millisecond.
const burst = 64

// kick is what the scheduler hands a worker: whether the request is
// already written and when (the timeout then runs from there).
type kick struct {
	start time.Time
	sent  bool
}

// schedule is the state of the Scraper's one timer loop. order, next and
// running are guarded by Scraper.mu; due and kicks are the loop's own.
type schedule struct {
	order   []*worker // live workers, oldest first; kicked round robin
	next    int       // index in order of the next worker to kick
	running bool      // the loop's goroutine is up
	stop    chan struct{}
	due     []*worker // the burst being started; reused
	kicks   []kick    // due's kicks; the loop's only
	pend    []int     // indices in due of answers not read yet; the loop's only
	poll    *time.Timer
}

// add appends a new worker; it is kicked by the next burst that reaches it.
func (sc *schedule) add(w *worker) { sc.order = append(sc.order, w) }

// compact forgets stopped workers, keeping the order of the others.
func (sc *schedule) compact() {
	sc.order = slices.DeleteFunc(sc.order, func(w *worker) bool { return w.gone })
	if sc.next >= len(sc.order) {
		sc.next = 0
	}
}

// nextLocked picks the next burst into sc.due and returns the pause
// before the one after it (interval over the number of bursts per
// interval); false when there is nothing left to scrape.
func (sc *schedule) nextLocked(interval time.Duration) (time.Duration, bool) {
	sc.due = sc.due[:0]
	n := len(sc.order)
	if n == 0 {
		return 0, false
	}
	bursts := (n + burst - 1) / burst
	for range (n + bursts - 1) / bursts {
		if sc.next >= n {
			sc.next = 0
		}
		sc.due = append(sc.due, sc.order[sc.next])
		sc.next++
	}
	return interval / time.Duration(bursts), true
}

// Waiting for a burst's answers. After writing a burst's requests the
// scheduler reads every answer that has arrived whole, then sleeps
// pollFirst and reads again, doubling the pause, for as long as
// pollBudget allows; only what is still unanswered then goes to its
// worker. A worker costs a wake-up of its own and sleeps of its own
// (its socket is off the runtime's poller: httptry.go), where one more
// pass of the scheduler costs one timer wake-up for the whole burst and
// a read that finds nothing per answer still missing. Engines take from
// a fraction of a millisecond (the cost test's servers) to several
// (Python's prometheus_client building the exposition), so the passes
// are spaced to catch both; an engine slower than the budget is left to
// its worker, which polls until the scrape's deadline.
const (
	pollFirst  = 500 * time.Microsecond
	pollBudget = 32 * time.Millisecond // at most; never over half the pause between bursts
)

// start starts the scrapes of one burst and returns when each has been
// published or handed to its worker, within budget. The requests on open
// plaintext connections are all written here first; the answers that
// arrive whole within the budget are read and published here (see
// pollFirst), and only the others (and targets to dial, TLS targets,
// slow engines) wake their worker. The common scrape thus costs one
// write and one read on this goroutine and no thread hand-off; the
// runtime never sees a goroutine runnable behind a write (it would hand
// the processor to another thread and its monitor would poll every
// 20 µs). It returns false when the scraper stopped meanwhile.
func (s *Scraper) start(due []*worker, budget time.Duration) bool {
	ks := s.sched.kicks[:0]
	for _, w := range due {
		// A worker still busy with its last scrape (a slow engine) sits
		// this burst out; busy also keeps the hand-over from blocking.
		if !w.busy.CompareAndSwap(false, true) {
			ks = append(ks, kick{})
			continue
		}
		k := kick{start: time.Now()}
		if g := w.lean.Load(); g != nil && w.ctx.Err() == nil {
			k.sent = g.presend()
		}
		ks = append(ks, k)
	}
	s.sched.kicks = ks
	pend := s.sched.pend[:0]
	for i, w := range due {
		switch {
		case ks[i].start.IsZero():
		case ks[i].sent:
			pend = append(pend, i)
		default:
			w.handOver(ks[i]) // nothing written: the worker dials or uses net/http
		}
	}
	stopped := false
	deadline := time.Now().Add(budget)
	for pause := pollFirst; ; pause *= 2 {
		pend = slices.DeleteFunc(pend, func(i int) bool {
			return due[i].ctx.Err() != nil || due[i].tryInline(ks[i]) // stopped: nothing to publish
		})
		if len(pend) == 0 || !time.Now().Add(pause).Before(deadline) {
			break
		}
		if !s.sched.sleep(pause) {
			stopped = true
			break
		}
	}
	for _, i := range pend {
		due[i].handOver(ks[i])
	}
	s.sched.pend = pend
	return !stopped
}

// handOver gives a scrape the scheduler started to the worker's
// goroutine. The worker is idle (the scheduler set busy), so the kick
// never waits.
func (w *worker) handOver(k kick) {
	select {
	case w.kick <- k:
	default:
	}
}

// sleep pauses the scheduler for d; false when the scraper stopped.
func (sc *schedule) sleep(d time.Duration) bool {
	if sc.poll == nil {
		sc.poll = time.NewTimer(d)
	} else {
		sc.poll.Reset(d)
	}
	select {
	case <-sc.stop:
		sc.poll.Stop()
		return false
	case <-sc.poll.C:
		return true
	}
}

// startLocked runs the loop if there are targets and it is not running.
func (s *Scraper) startLocked() {
	if s.sched.running || s.closed || len(s.sched.order) == 0 {
		return
	}
	s.sched.running = true
	s.wg.Add(1)
	go s.runSchedule(s.sched.stop)
}

// runSchedule kicks bursts of workers until there are none left or the
// Scraper closes. Its timer is the only one scraping needs: a worker has
// none, and a scrape arms none on the plaintext path.
func (s *Scraper) runSchedule(stop <-chan struct{}) {
	defer s.wg.Done()
	t := time.NewTimer(0) // the first targets are scraped at once
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		pause, more := s.sched.nextLocked(s.wait())
		s.sched.running = more
		due := s.sched.due
		s.mu.Unlock()
		if !more {
			return
		}
		next := time.Now().Add(pause)
		if !s.start(due, min(pause/2, pollBudget)) {
			return
		}
		t.Reset(time.Until(next))
	}
}

// stopLocked ends the loop (Close).
func (sc *schedule) stopLocked() {
	select {
	case <-sc.stop:
	default:
		close(sc.stop)
	}
}
