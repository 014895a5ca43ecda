package flow

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// Ticket describes one request to the queue.
type Ticket struct {
	Class Class
	// Tenant is the fairness key within the class (the API key's tenant;
	// "" for requests without a key, which share one share).
	Tenant string
	// Weight is the tenant's share within its class; ≤ 0 or NaN means 1.
	Weight float64
	// Deadline is when the request's first token is due (x-slo-ttft-ms);
	// zero: none. A request that cannot be dispatched by then is shed.
	Deadline time.Time
}

// Shed reasons, the label values of the datapath's shed counter.
const (
	ReasonQueueFull = "queue_full"    // the queue was at its length and nobody lower could make room
	ReasonTimeout   = "wait_exceeded" // it waited Options.MaxWait
	ReasonDeadline  = "deadline"      // its deadline passed, or would have before its turn
	ReasonDisplaced = "displaced"     // a higher class (or a fairer tenant) took its place
)

// ShedError is Wait's answer to a request that will not be dispatched.
type ShedError struct {
	Reason string
	// RetryAfter is when a retry has a fair chance: the queue's expected
	// drain time, at least a second and at most Options.MaxWait (whole
	// seconds).
	RetryAfter time.Duration
	// Waited is the time it spent queued (0 when shed on arrival).
	Waited time.Duration
}

func (e *ShedError) Error() string { return "request shed: " + e.Reason }

// Result says how Wait dispatched a request, for the caller's counters.
type Result struct {
	Queued bool          // it waited in the queue
	Wait   time.Duration // how long (0 when dispatched at once)
}

// defaultRecheck is how often the queue, while requests wait and no slot
// has been reported free, lets its head try anyway: a window raised by a
// rule update, or a slot freed on an endpoint the waiter it was granted
// to could not use, must not leave the queue idle until the wait bound.
const defaultRecheck = 200 * time.Millisecond

// Waiter states (waiter.state, under Queue.mu).
const (
	stateQueued = iota
	stateGranted
	stateDisplaced
	stateGone
)

type waiter struct {
	t     Ticket
	seq   uint64
	ch    chan struct{} // one signal per stay in the queue: granted or displaced
	state int
	tag   float64   // its tenant's finish tag when it was granted
	since time.Time // when it arrived (Stats' oldest wait)
}

// tenantQueue is one tenant's requests within one class.
type tenantQueue struct {
	last float64   // finish tag of its newest queued request
	tags []float64 // ascending, one per waiting request
	ws   []*waiter // earliest deadline first, then arrival
}

type classQueue struct {
	clock   float64 // virtual time: the finish tag last dispatched
	tenants map[string]*tenantQueue
	n       int
}

// Queue is one rule's gateway queue. Safe for concurrent use.
type Queue struct {
	o Options
	// gauge, if set, is told a class's queue length whenever it changes
	// (under the queue's lock: it must not block).
	gauge   func(Class, int)
	recheck time.Duration // defaultRecheck (tests lengthen it)

	mu      sync.Mutex
	classes [NumClasses]classQueue
	n       int
	seq     uint64
	epoch   uint64 // Release calls so far
	credit  [NumClasses]float64
	grants  uint64
	armed   bool // the recheck timer is pending
	checked uint64
	// lastGrant and interval estimate the dispatch rate while requests
	// wait (EWMA of the time between grants; lastGrant is zero while the
	// queue is empty, so idle time is never measured).
	lastGrant time.Time
	interval  time.Duration
	// lead is the EWMA of the time from dispatch to the engine's first
	// byte (ObserveLead): a request must leave the queue that long
	// before its deadline to make it.
	lead time.Duration
	// sheds counts the requests shed since the queue was made, by
	// reason (Stats).
	sheds map[string]uint64
}

// New returns an empty queue. gauge may be nil.
func New(o Options, gauge func(Class, int)) *Queue {
	q := &Queue{o: o, gauge: gauge, recheck: defaultRecheck, sheds: map[string]uint64{}}
	for c := range q.classes {
		q.classes[c].tenants = map[string]*tenantQueue{}
	}
	return q
}

// Len is the number of requests waiting.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// Wait dispatches the request t describes: try is called (from the
// caller's goroutine, never under the queue's lock) and reports whether
// the dispatch happened. With nobody queued try runs at once; when it
// fails, or others are queued, the request waits its turn and try runs
// again each time a slot frees for it. The error is a *ShedError or ctx's
// error; either way try has not succeeded and nothing is held.
func (q *Queue) Wait(ctx context.Context, t Ticket, try func() bool) (Result, error) {
	start := time.Now()
	q.mu.Lock()
	// A slot freed while try ran (epoch moved) may be this request's:
	// try again rather than queue behind nobody. Bounded: a busy fleet
	// frees slots all the time.
	for tries := 0; q.n == 0 && tries < 3; tries++ {
		e := q.epoch
		q.mu.Unlock()
		if try() {
			return Result{}, nil
		}
		q.mu.Lock()
		if q.epoch == e {
			break
		}
	}
	w, err := q.enqueueLocked(t, start)
	q.mu.Unlock()
	if err != nil {
		return Result{}, err
	}
	return q.wait(ctx, w, try, start)
}

func (q *Queue) wait(ctx context.Context, w *waiter, try func() bool, start time.Time) (Result, error) {
	end, reason := start.Add(q.o.MaxWait), ReasonTimeout
	if d := w.t.Deadline; !d.IsZero() {
		q.mu.Lock()
		d = d.Add(-q.leadFor(start, d))
		q.mu.Unlock()
		if d.Before(end) {
			end, reason = d, ReasonDeadline
		}
	}
	timer := time.NewTimer(time.Until(end))
	defer timer.Stop()
	for {
		select {
		case <-w.ch:
			q.mu.Lock()
			st := w.state
			q.mu.Unlock()
			if st == stateDisplaced {
				return Result{Queued: true, Wait: time.Since(start)}, q.shed(ReasonDisplaced, time.Since(start))
			}
			if try() {
				return Result{Queued: true, Wait: time.Since(start)}, nil
			}
			q.mu.Lock()
			q.requeueLocked(w)
			q.mu.Unlock()
		case <-timer.C:
			q.leave(w)
			return Result{Queued: true, Wait: time.Since(start)}, q.shed(reason, time.Since(start))
		case <-ctx.Done():
			q.leave(w)
			return Result{Queued: true, Wait: time.Since(start)}, ctx.Err()
		}
	}
}

// leave takes w out of the queue. When a grant reached it first, the
// grant is passed on: the slot it stood for is still free.
func (q *Queue) leave(w *waiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch w.state {
	case stateQueued:
		q.removeLocked(w)
	case stateGranted:
		if q.n > 0 {
			q.grantLocked()
		}
	}
	w.state = stateGone
}

// ObserveLead reports how long a dispatched request took from leaving the
// queue to its first byte from the engine (its prefill, mostly).
func (q *Queue) ObserveLead(d time.Duration) {
	if d <= 0 {
		return
	}
	q.mu.Lock()
	if q.lead == 0 {
		q.lead = d
	} else {
		q.lead = (4*q.lead + d) / 5
	}
	q.mu.Unlock()
}

// leadFor is the time before deadline d a request that arrived at start
// must be dispatched: the observed lead, but never more than half its
// budget, so a slow spell cannot shed every request with a deadline (and
// stop the observations that would end it).
func (q *Queue) leadFor(start, d time.Time) time.Duration {
	return min(q.lead, d.Sub(start)/2)
}

// Release reports that a slot may have freed (a request ended on an
// endpoint with a window, or the windows changed): the next request in
// order is let through to try.
func (q *Queue) Release() {
	q.mu.Lock()
	q.epoch++
	if q.n > 0 {
		q.grantLocked()
	}
	q.mu.Unlock()
}

func (q *Queue) shed(reason string, waited time.Duration) *ShedError {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shedLocked(reason, waited)
}

func (q *Queue) shedLocked(reason string, waited time.Duration) *ShedError {
	q.sheds[reason]++
	d := time.Duration(q.n+1) * q.interval
	d = min(max(d, time.Second), max(q.o.MaxWait, time.Second))
	d = (d + time.Second - 1).Truncate(time.Second)
	return &ShedError{Reason: reason, RetryAfter: d, Waited: waited}
}

// enqueueLocked adds a request, or refuses it: the queue is off or full
// with nobody to displace, or its deadline cannot be met.
func (q *Queue) enqueueLocked(t Ticket, now time.Time) (*waiter, error) {
	if q.o.QueueLength <= 0 || q.o.MaxWait <= 0 {
		return nil, q.shedLocked(ReasonQueueFull, 0)
	}
	if t.Class >= NumClasses {
		t.Class = DefaultClass
	}
	if !(t.Weight > 0) || math.IsInf(t.Weight, 0) {
		t.Weight = 1
	}
	cq := &q.classes[t.Class]
	tq := cq.tenants[t.Tenant]
	last := 0.0
	if tq != nil {
		last = tq.last
	}
	// The tag stands through a displacement below: the victim is of a
	// lower class or of a tenant with more queued than t's, never t's own
	// tenant, and taking it out moves no class clock.
	tag := max(cq.clock, last) + 1/t.Weight
	if d := t.Deadline; !d.IsZero() {
		if !d.After(now) {
			return nil, q.shedLocked(ReasonDeadline, 0)
		}
		if q.interval > 0 && !q.lastGrant.IsZero() {
			wait := time.Duration(q.aheadLocked(t.Class, tag)+1)*q.interval + q.leadFor(now, d)
			if now.Add(wait).After(d) {
				return nil, q.shedLocked(ReasonDeadline, 0)
			}
		}
	}
	if q.n >= q.o.QueueLength {
		v := q.victimLocked(t)
		if v == nil {
			return nil, q.shedLocked(ReasonQueueFull, 0)
		}
		q.removeLocked(v)
		v.state = stateDisplaced
		v.ch <- struct{}{}
	}
	q.seq++
	w := &waiter{t: t, seq: q.seq, ch: make(chan struct{}, 1), since: now}
	if tq == nil {
		tq = &tenantQueue{}
		cq.tenants[t.Tenant] = tq
	}
	tq.last = tag
	tq.tags = append(tq.tags, tag)
	tq.insert(w)
	q.countLocked(t.Class, +1)
	q.armLocked()
	return w, nil
}

// aheadLocked estimates how many queued requests a new one of class c
// with finish tag tag would wait behind: every request of a higher class,
// and those of its own class whose tags are smaller (fair queuing serves
// a light tenant's request before a heavy tenant's backlog). The minimum
// share of lower classes is left out: it only delays by a tenth.
func (q *Queue) aheadLocked(c Class, tag float64) int {
	n := 0
	for k := int(c) + 1; k < NumClasses; k++ {
		n += q.classes[k].n
	}
	for _, tq := range q.classes[c].tenants {
		i, _ := slices.BinarySearch(tq.tags, tag)
		n += i
	}
	return n
}

// requeueLocked puts back a granted request whose try found no room: it
// keeps its turn (its tag goes back to the front of its tenant's).
func (q *Queue) requeueLocked(w *waiter) {
	w.state = stateQueued
	cq := &q.classes[w.t.Class]
	tq := cq.tenants[w.t.Tenant]
	if tq == nil {
		tq = &tenantQueue{last: w.tag}
		cq.tenants[w.t.Tenant] = tq
	}
	i, _ := slices.BinarySearch(tq.tags, w.tag)
	tq.tags = slices.Insert(tq.tags, i, w.tag)
	tq.insert(w)
	q.countLocked(w.t.Class, +1)
	q.armLocked()
}

// insert places w in earliest-deadline-first order, arrival order among
// equals and after every request with a deadline when it has none.
func (tq *tenantQueue) insert(w *waiter) {
	i, _ := slices.BinarySearchFunc(tq.ws, w, func(a, b *waiter) int {
		ad, bd := a.t.Deadline, b.t.Deadline
		switch {
		case ad.IsZero() != bd.IsZero():
			if ad.IsZero() {
				return 1
			}
			return -1
		case !ad.Equal(bd):
			return ad.Compare(bd)
		}
		return int(a.seq) - int(b.seq)
	})
	tq.ws = slices.Insert(tq.ws, i, w)
}

// removeLocked takes a queued w out; its tenant gives up its newest tag.
func (q *Queue) removeLocked(w *waiter) {
	cq := &q.classes[w.t.Class]
	tq := cq.tenants[w.t.Tenant]
	if tq == nil {
		return
	}
	k := slices.Index(tq.ws, w)
	if k < 0 {
		return
	}
	tq.ws = slices.Delete(tq.ws, k, k+1)
	tq.tags = tq.tags[:len(tq.tags)-1]
	if len(tq.tags) > 0 {
		tq.last = tq.tags[len(tq.tags)-1]
	} else {
		delete(cq.tenants, w.t.Tenant)
	}
	q.countLocked(w.t.Class, -1)
}

func (q *Queue) countLocked(c Class, d int) {
	q.classes[c].n += d
	q.n += d
	if q.n == 0 {
		q.lastGrant = time.Time{}
	}
	if q.gauge != nil {
		q.gauge(c, q.classes[c].n)
	}
}

// victimLocked chooses whom a full queue sheds to admit t: the newest
// request of the tenant with the most queued in the lowest class below
// t's; else, in t's class, the newest of a tenant with more than one
// request more queued than t's tenant; else nobody (t is shed).
func (q *Queue) victimLocked(t Ticket) *waiter {
	for c := range int(t.Class) {
		if q.classes[c].n > 0 {
			if tq := q.classes[c].biggest(); tq != nil {
				return tq.newest()
			}
		}
	}
	cq := &q.classes[t.Class]
	mine := 0
	if tq := cq.tenants[t.Tenant]; tq != nil {
		mine = len(tq.ws)
	}
	if big := cq.biggest(); big != nil && len(big.ws) > mine+1 {
		return big.newest()
	}
	return nil
}

func (cq *classQueue) biggest() *tenantQueue {
	var big *tenantQueue
	for _, tq := range cq.tenants {
		if big == nil || len(tq.ws) > len(big.ws) || (len(tq.ws) == len(big.ws) && tq.newest().seq > big.newest().seq) {
			big = tq
		}
	}
	return big
}

func (tq *tenantQueue) newest() *waiter {
	var n *waiter
	for _, w := range tq.ws {
		if n == nil || w.seq > n.seq {
			n = w
		}
	}
	return n
}

// grantLocked lets the next request in order through: its class
// (classLocked), the tenant of the class with the smallest head tag, and
// that tenant's earliest deadline.
func (q *Queue) grantLocked() {
	c := q.classLocked()
	if c < 0 {
		return
	}
	cq := &q.classes[c]
	var name string
	var tq *tenantQueue
	for k, v := range cq.tenants {
		if tq == nil || v.tags[0] < tq.tags[0] || (v.tags[0] == tq.tags[0] && k < name) {
			name, tq = k, v
		}
	}
	w := tq.ws[0]
	tq.ws = tq.ws[1:]
	w.tag = tq.tags[0]
	tq.tags = tq.tags[1:]
	cq.clock = max(cq.clock, w.tag)
	if len(tq.ws) == 0 {
		delete(cq.tenants, name)
	}
	now := time.Now()
	if !q.lastGrant.IsZero() {
		dt := now.Sub(q.lastGrant)
		if q.interval == 0 {
			q.interval = dt
		} else {
			q.interval = (4*q.interval + dt) / 5
		}
	}
	q.lastGrant = now
	q.grants++
	q.countLocked(Class(c), -1)
	w.state = stateGranted
	w.ch <- struct{}{}
}

// classLocked is the class the next dispatch goes to: the highest with
// requests waiting, unless a lower waiting class has earned its minimum
// share (each dispatch while it waits below another adds MinShare to its
// credit; a whole credit buys one dispatch). -1 when nobody waits.
func (q *Queue) classLocked() int {
	top := -1
	for c := NumClasses - 1; c >= 0; c-- {
		if q.classes[c].n > 0 {
			top = c
			break
		}
	}
	for c := range max(top, 0) {
		if q.classes[c].n > 0 {
			q.credit[c] += q.o.MinShare
		} else {
			q.credit[c] = 0
		}
	}
	for c := range max(top, 0) {
		if q.classes[c].n > 0 && q.credit[c] >= 1 {
			q.credit[c]--
			return c
		}
	}
	return top
}

// armLocked schedules a recheck while requests wait: when no grant has
// happened since the last one, the head is let through to try.
func (q *Queue) armLocked() {
	if q.armed || q.n == 0 {
		return
	}
	q.armed = true
	q.checked = q.grants
	time.AfterFunc(q.recheck, q.recheckNow)
}

func (q *Queue) recheckNow() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed = false
	if q.n > 0 && q.grants == q.checked {
		q.grantLocked()
	}
	q.armLocked()
}
