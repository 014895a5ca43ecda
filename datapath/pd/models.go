package pd

import "sync"

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
	mu     sync.RWMutex
	known  map[string]struct{}
}

// NewModelLabels builds the labeller; max ≤ 0 uses DefaultMaxModelLabels.
func NewModelLabels(pinned string, max int) *ModelLabels {
	if max <= 0 {
		max = DefaultMaxModelLabels
	}
	return &ModelLabels{pinned: pinned, max: max, known: map[string]struct{}{}}
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
	l.mu.RLock()
	_, ok := l.known[model]
	full := len(l.known) >= l.max
	l.mu.RUnlock()
	switch {
	case ok:
		return model
	case !served || full:
		return ModelOther
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.known[model]; !ok {
		if len(l.known) >= l.max {
			return ModelOther
		}
		l.known[model] = struct{}{}
	}
	return model
}
