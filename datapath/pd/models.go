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
	// known is an immutable list, replaced whole (under mu) when a model
	// is learned. Why not a read lock around one map: Label runs on every
	// request of the rule, and a read lock's counter is a cache line that
	// every core writes; a model is learned at most max times. Why a list:
	// it holds at most max (16) names, and a scan of a few comparisons,
	// most ending at the length, costs less than hashing the name.
	known atomic.Pointer[[]string]
	mu    sync.Mutex // serialises learning
}

// NewModelLabels builds the labeller; max ≤ 0 uses DefaultMaxModelLabels.
func NewModelLabels(pinned string, max int) *ModelLabels {
	if max <= 0 {
		max = DefaultMaxModelLabels
	}
	l := &ModelLabels{pinned: pinned, max: max}
	l.known.Store(&[]string{})
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
	if knows(known, model) {
		return model
	}
	if !served || len(known) >= l.max {
		return ModelOther
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	known = *l.known.Load() // another request may have learned it
	if knows(known, model) {
		return model
	}
	if len(known) >= l.max {
		return ModelOther
	}
	next := make([]string, len(known), len(known)+1)
	copy(next, known)
	next = append(next, model)
	l.known.Store(&next)
	return model
}

// knows reports whether model is in known.
func knows(known []string, model string) bool {
	for _, k := range known {
		if k == model {
			return true
		}
	}
	return false
}
