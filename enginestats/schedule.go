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

// start starts the scrapes of one burst. The requests on open plaintext
// connections are all written here first; then every answer that has
// already arrived whole is read and published here too, and only the
// others (and targets to dial, TLS targets, slow engines) wake their
// worker. The common scrape thus costs one write and one read on this
// goroutine and no thread hand-off; the runtime never sees a goroutine
// runnable behind a write (it would hand the processor to another thread
// and its monitor would poll every 20 µs).
func (s *Scraper) start(due []*worker) {
	ks := s.sched.kicks[:0]
	for _, w := range due {
		// A worker still busy with its last scrape (a slow engine) sits
		// this burst out; busy also keeps the send below from blocking.
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
	for i, w := range due {
		if ks[i].start.IsZero() {
			continue
		}
		if ks[i].sent && w.tryInline(ks[i]) {
			w.busy.Store(false)
			continue
		}
		select {
		case w.kick <- ks[i]:
		default:
		}
	}
	s.sched.kicks = ks
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
		s.start(due)
		t.Reset(pause)
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
