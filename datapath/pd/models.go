package pd

import (
	"sync"
	"sync/atomic"
)

// ModelOther is the model label of requests outside a rule's known models.
const ModelOther = "other"

// DefaultMaxModelLabels bounds the distinct model labels one rule learns.
const DefaultMaxModelLabels = 16

// ModelLabels is the model label of loxilb_ai_pd_requests_total for one
// rule, with bounded cardinality: a rule that pins a model (model_name) is
// always labelled with it; otherwise the rule's known models are those its
// engines served successfully (an engine answers 404 for a model it does
// not serve), learned up to a cap, and everything else is "other". A client
// inventing model names therefore cannot grow the series set. Safe for
// concurrent use.
type ModelLabels struct {
	pinned string
	max    int
	// known is an immutable set, replaced whole (under mu) when a model is
	// learned. Why not a read lock around one map: Label runs on every
	// request of the rule, and a read lock's counter is a cache line that
	// every core writes; a model is learned at most max times.
	known atomic.Pointer[map[string]struct{}]
	mu    sync.Mutex // serialises learning
}

// NewModelLabels builds the labeller; max ≤ 0 uses DefaultMaxModelLabels.
func NewModelLabels(pinned string, max int) *ModelLabels {
	if max <= 0 {
		max = DefaultMaxModelLabels
	}
	l := &ModelLabels{pinned: pinned, max: max}
	l.known.Store(&map[string]struct{}{})
	return l
}

// Label returns the label of a request for model; served says the engines
// answered it successfully, which makes an unseen model known while there
// is room.
func (l *ModelLabels) Label(model string, served bool) string {
	if l == nil {
		return ModelOther
	}
	if l.pinned != "" {
		return l.pinned
	}
	if model == "" {
		return ModelOther
	}
	known := *l.known.Load()
	if _, ok := known[model]; ok {
		return model
	}
	if !served || len(known) >= l.max {
		return ModelOther
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	known = *l.known.Load() // another request may have learned it
	if _, ok := known[model]; ok {
		return model
	}
	if len(known) >= l.max {
		return ModelOther
	}
	next := make(map[string]struct{}, len(known)+1)
	for k := range known {
		next[k] = struct{}{}
	}
	next[model] = struct{}{}
	l.known.Store(&next)
	return model
}
