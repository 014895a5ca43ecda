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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/metrics"
)

// acceptHeader asks for the text format (never protobuf) and, by omitting
// Accept-Encoding with compression disabled, for an uncompressed body:
// inflating costs more CPU than the bytes on loopback or a LAN.
const acceptHeader = "text/plain;version=0.0.4;q=1,application/openmetrics-text;q=0.5,*/*;q=0.1"

// Target is one endpoint to scrape.
type Target struct {
	Rule     string // metric label "rule"
	Endpoint string // endpoint ID ("ip:port"), metric label "endpoint"; unique per Set
	URL      string // the exposition, e.g. http://10.0.0.5:8000/metrics
	Engine   string // dialect (kvEngineType; "" is vLLM)
	// Client scrapes this target (a TLS engine's trust); nil: the scraper's.
	Client *http.Client
	// Cell receives every snapshot; the datapath's pickers read it.
	Cell *Cell
}

// Scraper scrapes every target of every owner (a rule): one scheduler
// goroutine starts the scrapes in bursts (schedule.go), one goroutine per
// target runs its own scrape. It is safe for concurrent use; no method
// waits on the network.
type Scraper struct {
	opts   Options
	m      *metrics.Engine
	log    logrus.FieldLogger
	client *http.Client

	mu     sync.Mutex
	owners map[string]map[string]*worker // owner → endpoint ID → worker
	closed bool
	wg     sync.WaitGroup
	sched  schedule // guarded by mu
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
		opts:   opts,
		m:      m,
		log:    log,
		client: &http.Client{Transport: tr, CheckRedirect: noRedirect},
		owners: map[string]map[string]*worker{},
		sched:  schedule{stop: make(chan struct{})},
	}
}

// noRedirect keeps a scrape on the engine it was aimed at.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Options returns the effective options.
func (s *Scraper) Options() Options { return s.opts }

// Set makes owner's targets exactly ts: a target already scraped keeps its
// goroutine, buffer and last snapshot (its URL, engine or labels may
// change), new ones start, missing ones stop and lose their series. With
// scraping off, or after Close, it does nothing.
func (s *Scraper) Set(owner string, ts []Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.opts.Off() {
		return
	}
	cur := s.owners[owner]
	next := make(map[string]*worker, len(ts))
	for i := range ts {
		t := ts[i]
		if t.Cell == nil {
			continue
		}
		if w := cur[t.Endpoint]; w != nil {
			if old := w.cfg.Load(); old.Rule != t.Rule && s.m != nil {
				s.m.ForgetEndpoint(old.Rule, old.Endpoint)
			}
			w.cfg.Store(&t)
			next[t.Endpoint] = w
			delete(cur, t.Endpoint)
			continue
		}
		if next[t.Endpoint] != nil {
			continue // listed twice: one scrape serves both
		}
		w := &worker{s: s, kick: make(chan kick, 1)}
		w.cfg.Store(&t)
		w.ctx, w.cancel = context.WithCancel(context.Background())
		next[t.Endpoint] = w
		s.wg.Add(1)
		go w.run()
		s.sched.add(w)
	}
	for _, w := range cur {
		s.stopLocked(w)
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
	for _, w := range s.owners[owner] {
		s.stopLocked(w)
	}
	s.sched.compact()
	delete(s.owners, owner)
}

// stopLocked cancels w; its series go now, so a rule re-created at once
// under the same name keeps the ones it registers next.
func (s *Scraper) stopLocked(w *worker) {
	w.cancel()
	w.gone = true
	if g := w.lean.Load(); g != nil {
		g.close() // a scrape blocked on it returns now
	}
	if s.m != nil {
		t := w.cfg.Load()
		s.m.ForgetEndpoint(t.Rule, t.Endpoint)
	}
}

// Targets is the number of endpoints being scraped.
func (s *Scraper) Targets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ws := range s.owners {
		n += len(ws)
	}
	return n
}

// Close stops every target and waits for their goroutines (a scrape in
// flight is cancelled, so this takes no longer than a connection teardown).
func (s *Scraper) Close() {
	s.mu.Lock()
	s.closed = true
	for o, ws := range s.owners {
		for _, w := range ws {
			s.stopLocked(w)
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

// worker scrapes one target each time the scheduler kicks it, until
// cancelled. Everything but cfg, kick, busy and gone belongs to whoever
// holds busy: the scheduler while it finishes a scrape itself
// (tryInline), else the worker's goroutine.
type worker struct {
	s      *Scraper
	cfg    atomic.Pointer[Target]
	ctx    context.Context
	cancel context.CancelFunc
	// kick starts one scrape; busy is set by the scheduler when it kicks
	// and cleared when the scrape is over, so a slow scrape is skipped
	// by the bursts that come while it runs, never queued behind itself.
	kick chan kick
	busy atomic.Bool
	gone bool // stopped; guarded by Scraper.mu

	buf    []byte
	url    string  // t.URL with the dialect's name[] filter
	urlFor *Target // the cfg url and lean were built for
	// lean is the plaintext fast path (nil: net/http); atomic because
	// Scraper.stopLocked closes its connection to end a blocked scrape.
	lean       atomic.Pointer[getter]
	completed  float64 // last FieldCompleted seen
	seenCount  bool
	lastReason string
	ser        series
}

// series are a target's exported series, each looked up on first use for
// one target configuration and kept (a lookup hashes the labels under the
// vector's lock, every scrape otherwise). A series is created when it is
// first set, as before: a target that never answers exports no gauges.
type series struct {
	of                         *Target
	ok                         prometheus.Counter
	waiting, running, kv, last prometheus.Gauge
}

func (w *worker) run() {
	defer w.s.wg.Done()
	defer func() {
		if g := w.lean.Load(); g != nil {
			g.close()
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
	t := w.cfg.Load()
	d := DialectFor(t.Engine)
	sample, reason := w.fetch(t, d, k)
	w.publish(t, d, sample, reason, k.start)
}

// tryInline finishes a scrape whose request presend wrote, on the
// scheduler's goroutine, when the whole answer has already arrived; false
// leaves it to the worker. The scheduler holds busy, so the worker's
// state is its alone meanwhile.
func (w *worker) tryInline(k kick) bool {
	t := w.cfg.Load()
	g := w.lean.Load()
	if w.urlFor != t || g == nil {
		return false
	}
	body, done, err := g.tryReceive(w.s.opts.MaxBytes, w.buf[:0])
	if !done {
		return false
	}
	d := DialectFor(t.Engine)
	sample, reason := w.leanOutcome(body, err, k.start.Add(w.s.opts.Timeout), d)
	w.publish(t, d, sample, reason, k.start)
	return true
}

// publish turns one scrape's outcome into the target's next snapshot.
func (w *worker) publish(t *Target, d *Dialect, sample Sample, reason string, start time.Time) {
	if w.ctx.Err() != nil {
		return // stopped mid-scrape: publish nothing, touch no series
	}
	now := time.Now()
	prev := t.Cell.Load()
	snap := &Snapshot{Engine: d.Engine, Reason: reason, Tried: now}
	if prev != nil {
		snap.Sample, snap.At, snap.Expires, snap.Restarts = prev.Sample, prev.At, prev.Expires, prev.Restarts
	}
	if reason == ReasonOK && sample.Has(FieldCompleted) {
		if w.seenCount && sample.Completed < w.completed {
			reason, snap.Reason = ReasonCounterReset, ReasonCounterReset
			snap.Restarts++
		}
		w.completed, w.seenCount = sample.Completed, true
	}
	if reason == ReasonOK || reason == ReasonCounterReset {
		snap.Sample, snap.At, snap.Expires = sample, now, now.Add(w.s.opts.StaleAfter)
	}
	// Export before publishing: whoever sees the new snapshot also sees its gauges.
	w.record(t, snap, now.Sub(start))
	t.Cell.store(snap)
}

// record exports one scrape and logs a change of outcome.
func (w *worker) record(t *Target, snap *Snapshot, took time.Duration) {
	if m := w.s.m; m != nil {
		m.Duration.Observe(took.Seconds())
		if w.ser.of != t {
			w.ser = series{of: t}
		}
		ser := &w.ser
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
	if snap.Reason != w.lastReason {
		l := w.s.log.WithFields(logrus.Fields{"rule": t.Rule, "endpoint": t.Endpoint, "url": t.URL, "result": snap.Reason})
		if snap.Reason == ReasonOK {
			l.Info("engine metrics: scraping")
		} else {
			l.Info("engine metrics: scrape not taken; the endpoint's signal is ignored once stale")
		}
		w.lastReason = snap.Reason
	}
}

// fetch runs one HTTP scrape and parses the body.
func (w *worker) fetch(t *Target, d *Dialect, k kick) (Sample, string) {
	if w.urlFor != t {
		k.sent = false // on a getter this target no longer uses
		w.url, w.urlFor = t.URL+d.query(), t
		var g *getter
		if t.Client == nil {
			g = newGetter(t.URL, d.query())
		}
		if old := w.lean.Swap(g); old != nil {
			old.close()
		}
	}
	if g := w.lean.Load(); g != nil {
		return w.fetchLean(g, d, k)
	}
	ctx, cancel := context.WithDeadline(w.ctx, k.start.Add(w.s.opts.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.url, nil)
	if err != nil {
		return Sample{}, ReasonConnect
	}
	req.Header.Set("Accept", acceptHeader)
	c := t.Client
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
	return parseReason(body, d)
}

// fetchLean is fetch over the worker's own connection.
func (w *worker) fetchLean(g *getter, d *Dialect, k kick) (Sample, string) {
	deadline := k.start.Add(w.s.opts.Timeout)
	body, err := g.get(deadline, w.s.opts.MaxBytes, w.buf[:0], k.sent)
	return w.leanOutcome(body, err, deadline, d)
}

// leanOutcome keeps the body's buffer and names a lean scrape's outcome.
func (w *worker) leanOutcome(body []byte, err error, deadline time.Time, d *Dialect) (Sample, string) {
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
	return parseReason(body, d)
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
