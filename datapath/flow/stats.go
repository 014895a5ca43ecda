package flow

import (
	"maps"
	"time"
)

// Stats is a queue's state for the rule's status and explanation: what
// waits now and what was shed since the queue was made.
type Stats struct {
	Queued  int             // requests waiting now
	ByClass [NumClasses]int // of which in each class
	// OldestWait is how long the longest-waiting request has waited
	// (0 when none waits).
	OldestWait time.Duration
	// Shed counts the requests shed since the queue was made, by reason
	// (the Reason… constants); reasons never seen are absent.
	Shed map[string]uint64
}

// Stats reads the queue's state at now. It walks the waiting requests
// (at most Options.QueueLength) under the queue's lock: meant for status
// views, never for the request path.
func (q *Queue) Stats(now time.Time) Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := Stats{Queued: q.n, Shed: maps.Clone(q.sheds)}
	var oldest time.Time
	for c := range q.classes {
		cq := &q.classes[c]
		st.ByClass[c] = cq.n
		for _, tq := range cq.tenants {
			for _, w := range tq.ws {
				if oldest.IsZero() || w.since.Before(oldest) {
					oldest = w.since
				}
			}
		}
	}
	if !oldest.IsZero() {
		st.OldestWait = max(now.Sub(oldest), 0)
	}
	return st
}
