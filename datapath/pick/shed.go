package pick

import (
	"context"
	"time"
)

// Admission is flow control's seam in front of a pick: before an endpoint
// is chosen, it either lets the request through — the returned release is
// called exactly once when the request ends, however it ends, so a queue
// or concurrency slot held for it is given back — or refuses it with an
// error. A *Shed error (or any error implementing ShedReason) means "shed"
// and is answered 429 with the reason; any other error is the admission's
// failure, answered as the caller answers internal errors. Admit may block
// (a queue) until ctx ends.
type Admission interface {
	Admit(ctx context.Context, d Demand) (release func(), err error)
}

// Demand is what a request tells flow control about itself: which pool it
// wants and the steering hints a gateway or client sent (the Gateway API
// Inference Extension's objective and fairness id, llm-d's SLO headers).
type Demand struct {
	Rule       string        // the rule (pool) asked
	Model      string        // the model the request is served as ("" when not known)
	Objective  string        // priority class name; "" = the default class
	FairnessID string        // the flow to share capacity fairly across; "" = none
	TTFT       time.Duration // time-to-first-token target; 0 = none
}

// Shed is an admission's refusal: the pool is saturated for this request's
// class (a full queue, a sheddable priority under load, a wait that ran
// out). The request never reached an endpoint, so a client may retry it.
type Shed struct {
	Reason string // short machine-readable reason, e.g. "queue_full"; sent in the refusal's reason header
}

func (s *Shed) Error() string { return "shed: " + s.Reason }

// ShedReason is the reason a front end (the EPP, the proxy) puts in its
// 429 answer. Front ends match this method rather than the type, so they
// need not import this package.
func (s *Shed) ShedReason() string {
	if s.Reason == "" {
		return "shed"
	}
	return s.Reason
}
