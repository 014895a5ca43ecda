package datapath

import (
	"sync"
	"sync/atomic"

	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// lazyCounter is one counter child of a vector, looked up once and then
// reused: WithLabelValues hashes its labels and takes the vector's lock on
// every call, which per request is measurable (see docs/performance.md).
// The child is made on first use, so a series appears exactly when it
// would have with WithLabelValues. It lives on a compiled rule, whose
// series are deleted only when the rule is removed.
type lazyCounter struct {
	p atomic.Pointer[prometheus.Counter]
}

func (l *lazyCounter) get(v *prometheus.CounterVec, labels ...string) prometheus.Counter {
	if c := l.p.Load(); c != nil {
		return *c
	}
	c := v.WithLabelValues(labels...)
	l.p.Store(&c) // a racing first use stores the same child
	return c
}

// chwblMetrics are a sel 8/10 rule's per-pick counters.
type chwblMetrics struct {
	picks [chwbl.SourceRoundRobin + 1]lazyCounter // by routing key source
	skips lazyCounter
}

// countPick records one CHWBL pick and the members it passed over.
func (c *compiled) countPick(src chwbl.Source, skipped int) {
	rx := c.rx
	if skipped > 0 {
		c.chwblm.skips.get(rx.CHWBLBoundSkips, c.label).Add(float64(skipped))
	}
	if int(src) < len(c.chwblm.picks) {
		c.chwblm.picks[src].get(rx.CHWBLPicks, c.label, src.String()).Inc()
		return
	}
	rx.CHWBLPicks.WithLabelValues(c.label, src.String()).Inc()
}

// counterCache maps up to three label values after the rule label to their
// counter child, for vectors whose per-request labels come from a small
// fixed set (ladder tier/outcome/reason constants; leg endpoint/phase/
// status). The map is as bounded as the vector's own series. An array key
// keeps lookups allocation-free, which a sync.Map (boxing the key) is not.
type counterCache struct {
	mu sync.RWMutex
	m  map[[3]string]prometheus.Counter
}

func (cc *counterCache) get(v *prometheus.CounterVec, rule string, k [3]string) prometheus.Counter {
	cc.mu.RLock()
	ctr, ok := cc.m[k]
	cc.mu.RUnlock()
	if ok {
		return ctr
	}
	ctr = v.WithLabelValues(rule, k[0], k[1], k[2])
	cc.mu.Lock()
	if cc.m == nil {
		cc.m = make(map[[3]string]prometheus.Counter)
	}
	cc.m[k] = ctr
	cc.mu.Unlock()
	return ctr
}

// pdCounters are a P/D rule's per-request counters: one ladder decision
// per step and one leg count per leg.
type pdCounters struct {
	ladder counterCache // LadderDecisions{rule, tier, outcome, reason}
	legs   counterCache // LegRequests{rule, endpoint, phase, status}
}

// lazyObserver is lazyCounter for a histogram child. It is a copy, not
// one generic helper over both vector types: calling WithLabelValues
// through a type parameter or an interface makes the variadic labels
// escape, so every call, the cached one included, would allocate them
// (go build -gcflags=-m reports "... argument escapes to heap").
//
// It keeps the series as a *metrics.Histogram and get is small enough to
// be inlined: a request's observation is then a load, a test and a direct
// call, where a called get and an Observe through prometheus.Observer
// were ~20 instructions more each (three a small request, callgrind).
type lazyObserver struct {
	p atomic.Pointer[metrics.Histogram]
}

func (l *lazyObserver) get(v *metrics.HistogramVec, labels ...string) *metrics.Histogram {
	if h := l.p.Load(); h != nil {
		return h
	}
	return l.resolve(v, labels)
}

// resolve is get's first use: the child made (or found) and kept.
func (l *lazyObserver) resolve(v *metrics.HistogramVec, labels []string) *metrics.Histogram {
	h := v.Series(labels...)
	l.p.Store(h) // a racing first use stores the same child
	return h
}

// modelSeries are one model label's children of the {rule, model} LLM
// families, each made on first use like a lazyCounter.
type modelSeries struct {
	duration, ttft, tpot, itl lazyObserver
	// named is the label with these children, made with them, for
	// llmSeries.last: a rule whose answers alternate between models
	// stores a pointer per switch, and allocates nothing.
	named modelOf
}

// llmSeries caches a rule's {rule, model} LLM children by model label.
// The key is the bounded label (compiled.llmModels: the pinned model, a
// model learned up to the rule's cap, or "other"), never the client's model
// name, so the map holds at most as many entries as the families have
// series for the rule, whatever names clients send.
//
// The map is immutable once stored, replaced whole (under mu) when a label
// is added, as pd.ModelLabels' set is: a read lock's counter is a line
// every core writes, and labels are added at most the rule's cap plus one
// times. last is the model of the latest request whose label was its own
// model, with its label and children (reqObs.series).
type llmSeries struct {
	models atomic.Pointer[map[string]*modelSeries]
	mu     sync.Mutex // serialises additions
	last   atomic.Pointer[modelOf]
}

// modelOf is a model name whose label is fixed for the rule's life (the
// name itself: pinned, or learned, and a learned model is never
// forgotten), with its children.
type modelOf struct {
	model string
	ms    *modelSeries
}

// model returns the children of a bounded model label.
func (ls *llmSeries) model(label string) *modelSeries {
	if m := ls.models.Load(); m != nil {
		if ms := (*m)[label]; ms != nil {
			return ms
		}
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var old map[string]*modelSeries
	if m := ls.models.Load(); m != nil {
		if ms := (*m)[label]; ms != nil {
			return ms
		}
		old = *m
	}
	next := make(map[string]*modelSeries, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	ms := &modelSeries{}
	ms.named = modelOf{model: label, ms: ms}
	next[label] = ms
	ls.models.Store(&next)
	return ms
}

// known returns the children of model when it is the latest model whose
// label was itself; nil: not known here (ask model).
func (ls *llmSeries) known(model string) *modelSeries {
	if l := ls.last.Load(); l != nil && l.model == model {
		return l.ms
	}
	return nil
}

// remember makes ms, whose label is its request's model, the one known
// answers; a store only when it changes.
func (ls *llmSeries) remember(ms *modelSeries) {
	if ls.last.Load() != &ms.named {
		ls.last.Store(&ms.named)
	}
}
