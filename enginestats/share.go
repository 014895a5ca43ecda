package enginestats

import (
	"context"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Sharing: many rules often name one engine (thousands of rules, one
// endpoint, told apart by model name). A scrape's answer depends only on
// what is asked and how, so every target with the same key shares one
// worker, one connection and one scrape per interval; the worker
// publishes each snapshot into every subscribed rule's Cell and exports
// each rule's own series (labels rule, endpoint).

// scrapeKey is what determines a scrape's answer: the URL asked (with
// the dialect's name[] filter), the dialect parsing it and the client
// (its TLS trust). The client is compared by pointer: the datapath builds
// one per TLS rule generation from the rule's backend trust, so TLS
// targets share only within one rule; plaintext targets (nil client)
// share across rules.
type scrapeKey struct {
	url    string
	engine string
	client *http.Client
}

// keyOf is t's scrape key.
func keyOf(t *Target) scrapeKey {
	d := DialectFor(t.Engine)
	return scrapeKey{url: t.URL + d.query(), engine: d.Engine, client: t.Client}
}

// sub is one owner's target on a shared worker: its labels and Cell (cfg,
// replaced by an update that keeps the key) and its series.
type sub struct {
	cfg  atomic.Pointer[Target]
	gone atomic.Bool // left its worker: publish skips it
	w    *worker     // the worker it is on; guarded by Scraper.mu
	// ser belongs to whoever holds the worker's busy; a sub never moves
	// between workers (a key change makes a new sub).
	ser series
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

// joinLocked subscribes sb to the worker for key, starting one if none
// scrapes it yet.
func (s *Scraper) joinLocked(key scrapeKey, sb *sub) {
	w := s.scrapes[key]
	if w == nil {
		w = &worker{s: s, key: key, kick: make(chan kick, 1), dialect: DialectFor(key.engine)}
		if key.client == nil {
			if g := newGetter(sb.cfg.Load().URL, w.dialect.query()); g != nil {
				w.lean.Store(g)
			}
		}
		w.ctx, w.cancel = context.WithCancel(context.Background())
		s.scrapes[key] = w
		s.wg.Add(1)
		go w.run()
		s.sched.add(w)
	}
	var next []*sub
	if subs := w.subs.Load(); subs != nil {
		next = make([]*sub, 0, len(*subs)+1)
		next = append(next, *subs...)
	}
	next = append(next, sb)
	w.subs.Store(&next)
	sb.w = w
}

// leaveLocked unsubscribes sb; forget drops its series (false: the same
// rule and endpoint go on under another key and keep them). The last sub
// to leave stops the worker.
func (s *Scraper) leaveLocked(sb *sub, forget bool) {
	w := sb.w
	w.pubMu.Lock()
	sb.gone.Store(true)
	if forget && s.m != nil {
		t := sb.cfg.Load()
		s.m.ForgetEndpoint(t.Rule, t.Endpoint)
	}
	w.pubMu.Unlock()
	subs := w.subs.Load()
	next := slices.DeleteFunc(slices.Clone(*subs), func(x *sub) bool { return x == sb })
	w.subs.Store(&next)
	if len(next) > 0 {
		return
	}
	delete(s.scrapes, w.key)
	w.cancel()
	w.gone = true
	if g := w.lean.Load(); g != nil {
		g.stop() // a scrape waiting on it returns now, and none dials again
	}
}
