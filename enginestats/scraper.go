package enginestats

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/metrics"
)

// acceptHeader asks for the text format (never protobuf) and, by omitting
// Accept-Encoding with compression disabled, for an uncompressed body:
// inflating costs more CPU than the bytes on loopback or a LAN.
const acceptHeader = "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5,*/*;q=0.1"

// Target is one endpoint to scrape for one owner. Targets asking the same
// URL of the same engine with the same Client share one scrape (share.go).
type Target struct {
	Rule     string // metric label "rule"
	Endpoint string // endpoint ID ("ip:port"), metric label "endpoint"; unique per Set
	URL      string // the exposition, e.g. http://10.0.0.5:8000/metrics
	Engine   string // dialect (kvEngineType; "" is vLLM)
	// Client scrapes this target (a TLS engine's trust); nil: the scraper's.
	// Targets share a scrape only with the same Client pointer.
	Client *http.Client
	// Cell receives every snapshot; the datapath's pickers read it.
	Cell *Cell
}

// Scraper scrapes every distinct target of every owner (a rule): one
// scheduler goroutine starts the scrapes in bursts (schedule.go), one
// goroutine per distinct scrape (share.go) runs it and publishes to every
// target naming it. It is safe for concurrent use; no method waits on the
// network.
type Scraper struct {
	opts   Options
	m      *metrics.Engine
	log    logrus.FieldLogger
	client *http.Client

	mu      sync.Mutex
	owners  map[string]map[string]*sub // owner → endpoint ID → its target
	scrapes map[scrapeKey]*worker      // one per distinct scrape
	closed  bool
	wg      sync.WaitGroup
	sched   schedule // guarded by mu
}

// New builds a Scraper; zero option fields take defaults. m and log may be
// nil.
func New(opts Options, m *metrics.Engine, log logrus.FieldLogger) *Scraper {
	opts = opts.withDefaults()
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: opts.Timeout}).DialContext,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1,
		// A whole exposition in few reads: syscalls are most of a scrape.
		ReadBufferSize:  64 << 10,
		IdleConnTimeout: max(90*time.Second, 4*opts.Interval),
	}
	return &Scraper{
		opts:    opts,
		m:       m,
		log:     log,
		client:  &http.Client{Transport: tr, CheckRedirect: noRedirect},
		owners:  map[string]map[string]*sub{},
		scrapes: map[scrapeKey]*worker{},
		sched:   schedule{stop: make(chan struct{})},
	}
}

// noRedirect keeps a scrape on the engine it was aimed at.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Options returns the effective options.
func (s *Scraper) Options() Options { return s.opts }

// Set makes owner's targets exactly ts. A target whose scrape key (URL,
// engine, client) is unchanged stays on its shared scrape, keeping its
// series (its labels or Cell may change); one whose key changed moves to
// the scrape of its new key; new ones join (or start) the scrape of their
// key; missing ones leave and lose their series. A scrape no target
// names any more stops. With scraping off, or after Close, it does
// nothing.
func (s *Scraper) Set(owner string, ts []Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.opts.Off() {
		return
	}
	cur := s.owners[owner]
	next := make(map[string]*sub, len(ts))
	for i := range ts {
		t := ts[i]
		if t.Cell == nil || next[t.Endpoint] != nil {
			continue // listed twice: one target serves both
		}
		key := keyOf(&t)
		if sb := cur[t.Endpoint]; sb != nil {
			delete(cur, t.Endpoint)
			relabel := sb.cfg.Load().Rule != t.Rule
			if sb.w.key != key {
				s.leaveLocked(sb, relabel) // moves; same labels keep their series
			} else {
				sb.w.pubMu.Lock()
				if relabel && s.m != nil {
					old := sb.cfg.Load()
					s.m.ForgetEndpoint(old.Rule, old.Endpoint)
				}
				sb.cfg.Store(&t)
				sb.w.pubMu.Unlock()
				next[t.Endpoint] = sb
				continue
			}
		}
		sb := &sub{}
		sb.cfg.Store(&t)
		s.joinLocked(key, sb)
		next[t.Endpoint] = sb
	}
	for _, sb := range cur {
		s.leaveLocked(sb, true)
	}
	s.sched.compact()
	s.startLocked()
	if len(next) == 0 {
		delete(s.owners, owner)
		return
	}
	s.owners[owner] = next
}

// Drop stops every target of owner.
func (s *Scraper) Drop(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sb := range s.owners[owner] {
		s.leaveLocked(sb, true)
	}
	s.sched.compact()
	delete(s.owners, owner)
}

// Targets is the number of distinct scrapes running: targets of any
// owners that share a URL, engine and client count once.
func (s *Scraper) Targets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.scrapes)
}

// Close stops every target and waits for their goroutines (a scrape in
// flight is cancelled, so this takes no longer than a connection teardown).
func (s *Scraper) Close() {
	s.mu.Lock()
	s.closed = true
	for o, sbs := range s.owners {
		for _, sb := range sbs {
			s.leaveLocked(sb, true)
		}
		delete(s.owners, o)
	}
	s.sched.compact()
	s.sched.stopLocked()
	s.mu.Unlock()
	s.wg.Wait()
	s.client.CloseIdleConnections()
}

// wait is the pause before the next scrape: Interval ± Jitter.
func (s *Scraper) wait() time.Duration {
	j := s.opts.Jitter * (2*rand.Float64() - 1)
	return time.Duration(float64(s.opts.Interval) * (1 + j))
}

// worker runs one distinct scrape each time the scheduler kicks it, until
// cancelled, and publishes it to every sub. key, dialect and the getter
// are fixed at creation. Everything but subs, kick, busy, lean and gone
// belongs to whoever holds busy: the scheduler while it finishes a scrape
// itself (tryInline), else the worker's goroutine.
type worker struct {
	s       *Scraper
	key     scrapeKey
	dialect *Dialect
	subs    atomic.Pointer[[]*sub] // replaced, never changed, under Scraper.mu
	// pubMu is held while a scrape is published and while a sub leaves,
	// so a leaving target's series, once forgotten, are never set again.
	// Only the control plane waits on it, for one publish at most.
	pubMu  sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	// kick starts one scrape; busy is set by the scheduler when it kicks
	// and cleared when the scrape is over, so a slow scrape is skipped
	// by the bursts that come while it runs, never queued behind itself.
	kick chan kick
	busy atomic.Bool
	gone bool // stopped; guarded by Scraper.mu

	buf []byte
	// lean is the plaintext fast path (nil: net/http); atomic because
	// Scraper.leaveLocked closes its connection to end a waiting scrape.
	lean       atomic.Pointer[getter]
	last       *Snapshot  // the snapshot the last scrape published
	slab       []Snapshot // the next snapshots to publish, written once each (snapshotSlab)
	completed  float64    // last FieldCompleted seen
	seenCount  bool
	lastReason string
}

func (w *worker) run() {
	defer w.s.wg.Done()
	defer func() {
		if g := w.lean.Load(); g != nil {
			g.stop()
		}
	}()
	for {
		select {
		case <-w.ctx.Done():
			return
		case k := <-w.kick:
			w.scrapeOnce(k)
		}
		w.busy.Store(false)
	}
}

// scrapeOnce fetches, parses and publishes one snapshot.
func (w *worker) scrapeOnce(k kick) {
	if !k.sent {
		// Nothing on the wire yet: the timeout runs from now, not from
		// the burst (a busy host may run this goroutine late).
		k.start = time.Now()
	}
	sample, reason := w.fetch(k)
	w.publish(sample, reason, k.start)
}

// tryInline finishes a scrape whose request presend wrote, on the
// scheduler's goroutine, when the whole answer has already arrived, and
// frees the worker; false leaves the scrape pending. The scheduler holds
// busy, so the worker's state is its alone meanwhile.
func (w *worker) tryInline(k kick) bool {
	g := w.lean.Load()
	if g == nil {
		return false
	}
	body, done, err := g.tryReceive(w.s.opts.MaxBytes, w.buf[:0])
	if !done {
		return false
	}
	sample, reason := w.leanOutcome(body, err, k.start.Add(w.s.opts.Timeout))
	w.publish(sample, reason, k.start)
	w.busy.Store(false)
	return true
}

// publish turns one scrape's outcome into the next snapshot of every
// target on the worker. One snapshot serves every Cell the last one was
// published into; a Cell holding another (a target that just joined or
// moved here) gets its own, built on what it held.
func (w *worker) publish(sample Sample, reason string, start time.Time) {
	if w.ctx.Err() != nil {
		return // stopped mid-scrape: publish nothing, touch no series
	}
	now := time.Now()
	if reason == ReasonOK && sample.Has(FieldCompleted) {
		if w.seenCount && sample.Completed < w.completed {
			reason = ReasonCounterReset
		}
		w.completed, w.seenCount = sample.Completed, true
	}
	w.pubMu.Lock()
	defer w.pubMu.Unlock()
	prev := w.last
	snap := w.nextSnapshot(prev, sample, reason, now)
	w.last = snap
	if m := w.s.m; m != nil {
		m.Duration.Observe(now.Sub(start).Seconds())
	}
	for _, sb := range *w.subs.Load() {
		if sb.gone.Load() {
			continue
		}
		t := sb.cfg.Load()
		s := snap
		if had := t.Cell.Load(); had != prev && !converges(had, prev, reason) {
			s = w.nextSnapshot(had, sample, reason, now)
		}
		// Export before publishing: whoever sees the new snapshot also sees its gauges.
		w.record(sb, t, s)
		t.Cell.store(s)
	}
	w.logOutcome(reason)
}

// converges reports whether the snapshot after had equals the one after
// prev: a good scrape replaces all they carry but the restart count. A
// target that joined a running scrape thus shares its snapshots (one
// allocation per scrape) from its first good scrape on.
func converges(had, prev *Snapshot, reason string) bool {
	if reason != ReasonOK && reason != ReasonCounterReset {
		return false
	}
	restarts := func(s *Snapshot) uint64 {
		if s == nil {
			return 0
		}
		return s.Restarts
	}
	return restarts(had) == restarts(prev)
}

// snapshotSlab is how many snapshots a worker allocates at once. A
// published snapshot is never written again, so handing out the elements
// of one array in turn keeps that promise while the allocator runs once
// per snapshotSlab scrapes instead of every scrape (a malloc was about a
// twentieth of a scrape's CPU in a perf profile of TestScrapeCost). The
// price: a slab stays in memory while any reader holds one of its
// snapshots, about snapshotSlab × 180 bytes per distinct scrape.
const snapshotSlab = 16

// nextSnapshot is the snapshot after prev for one scrape's outcome: a
// failure keeps prev's values, a good scrape replaces them.
func (w *worker) nextSnapshot(prev *Snapshot, sample Sample, reason string, now time.Time) *Snapshot {
	if len(w.slab) == 0 {
		w.slab = make([]Snapshot, snapshotSlab)
	}
	snap := &w.slab[0]
	w.slab = w.slab[1:]
	*snap = Snapshot{Engine: w.dialect.Engine, Reason: reason, Tried: now}
	if prev != nil {
		snap.Sample, snap.At, snap.Expires, snap.Restarts = prev.Sample, prev.At, prev.Expires, prev.Restarts
	}
	if reason == ReasonCounterReset {
		snap.Restarts++
	}
	if reason == ReasonOK || reason == ReasonCounterReset {
		snap.Sample, snap.At, snap.Expires = sample, now, now.Add(w.s.opts.StaleAfter)
	}
	return snap
}

// record exports one scrape for one target.
func (w *worker) record(sb *sub, t *Target, snap *Snapshot) {
	m := w.s.m
	if m == nil {
		return
	}
	if sb.ser.of != t {
		sb.ser = series{of: t}
	}
	ser := &sb.ser
	if snap.Reason == ReasonOK {
		if ser.ok == nil {
			ser.ok = m.Scrapes.WithLabelValues(t.Rule, t.Endpoint, ReasonOK)
		}
		ser.ok.Inc()
	} else {
		m.Scrapes.WithLabelValues(t.Rule, t.Endpoint, snap.Reason).Inc()
	}
	if snap.At.Equal(snap.Tried) {
		if ser.waiting == nil {
			ser.waiting = m.Waiting.WithLabelValues(t.Rule, t.Endpoint)
			ser.running = m.Running.WithLabelValues(t.Rule, t.Endpoint)
			ser.last = m.LastScrape.WithLabelValues(t.Rule, t.Endpoint)
		}
		ser.waiting.Set(snap.Sample.Waiting)
		ser.running.Set(snap.Sample.Running)
		if snap.Sample.Has(FieldKVUsage) {
			if ser.kv == nil {
				ser.kv = m.KVUsage.WithLabelValues(t.Rule, t.Endpoint)
			}
			ser.kv.Set(snap.Sample.KVUsage)
		}
		ser.last.Set(float64(snap.At.UnixNano()) / 1e9)
	}
}

// logOutcome logs a change of the scrape's outcome, once for every target
// sharing it.
func (w *worker) logOutcome(reason string) {
	if reason == w.lastReason {
		return
	}
	w.lastReason = reason
	subs := *w.subs.Load()
	fields := logrus.Fields{"url": w.key.url, "result": reason, "targets": len(subs)}
	if len(subs) > 0 {
		t := subs[0].cfg.Load()
		fields["rule"], fields["endpoint"] = t.Rule, t.Endpoint
	}
	l := w.s.log.WithFields(fields)
	if reason == ReasonOK {
		l.Info("engine metrics: scraping")
	} else {
		l.Info("engine metrics: scrape not taken; the endpoint's signal is ignored once stale")
	}
}

// fetch runs one HTTP scrape and parses the body.
func (w *worker) fetch(k kick) (Sample, string) {
	if g := w.lean.Load(); g != nil {
		return w.fetchLean(g, k)
	}
	ctx, cancel := context.WithDeadline(w.ctx, k.start.Add(w.s.opts.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.key.url, nil)
	if err != nil {
		return Sample{}, ReasonConnect
	}
	req.Header.Set("Accept", acceptHeader)
	c := w.key.client
	if c == nil {
		c = w.s.client
	}
	resp, err := c.Do(req)
	if err != nil {
		return Sample{}, transportReason(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10) // small error pages keep the connection
		return Sample{}, ReasonStatus
	}
	if resp.ContentLength > w.s.opts.MaxBytes {
		return Sample{}, ReasonTooLarge
	}
	body, reason := readCapped(resp.Body, w.buf[:0], w.s.opts.MaxBytes)
	w.keep(body)
	if reason != "" {
		if reason == ReasonConnect && ctx.Err() != nil {
			reason = ReasonTimeout
		}
		return Sample{}, reason
	}
	return parseReason(body, w.dialect)
}

// fetchLean is fetch over the worker's own connection.
func (w *worker) fetchLean(g *getter, k kick) (Sample, string) {
	deadline := k.start.Add(w.s.opts.Timeout)
	body, err := g.get(deadline, w.s.opts.MaxBytes, w.buf[:0], k.sent)
	return w.leanOutcome(body, err, deadline)
}

// leanOutcome keeps the body's buffer and names a lean scrape's outcome.
func (w *worker) leanOutcome(body []byte, err error, deadline time.Time) (Sample, string) {
	w.keep(body)
	switch {
	case err == nil:
	case errors.Is(err, errTooLarge):
		return Sample{}, ReasonTooLarge
	case errors.Is(err, errStatus):
		return Sample{}, ReasonStatus
	case isTimeout(err) || !time.Now().Before(deadline):
		return Sample{}, ReasonTimeout
	default:
		return Sample{}, ReasonConnect
	}
	return parseReason(body, w.dialect)
}

// keep keeps a scrape's grown buffer for the next scrape, unless it grew
// past the body cap.
func (w *worker) keep(body []byte) {
	if cap(body) <= int(w.s.opts.MaxBytes)+1 {
		w.buf = body[:0]
	}
}

// parseReason parses a scraped body and names the outcome (a ParseError's
// reason, ReasonOK for a good sample): both fetch paths end here.
func parseReason(body []byte, d *Dialect) (Sample, string) {
	s, err := Parse(body, d)
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			return Sample{}, pe.Reason
		}
		return Sample{}, ReasonParse
	}
	return s, ReasonOK
}

// readCapped reads r into buf, refusing more than limit bytes.
func readCapped(r io.Reader, buf []byte, limit int64) ([]byte, string) {
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return buf, ReasonTooLarge
			}
			n := min(max(2*cap(buf), 16<<10), int(limit)+1)
			nb := make([]byte, len(buf), n)
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, ReasonTooLarge
		}
		if err == io.EOF {
			return buf, ""
		}
		if err != nil {
			return buf, ReasonConnect
		}
	}
}

// transportReason classifies a failed round trip.
func transportReason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return ReasonTimeout
	}
	return ReasonConnect
}

// isTimeout reports whether err is a network timeout (a deadline passed).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
