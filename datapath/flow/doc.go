// Package flow is the gateway queue that holds requests back when every
// engine a rule may send to is at its admission window, and decides who
// goes next when a slot frees.
//
// The contract is small: a caller describes a request (Ticket: its
// priority Class, its tenant, an optional time-to-first-token deadline)
// and hands Wait a try function that attempts the real dispatch (pick an
// endpoint with room and take its window slot). Wait calls try at once
// when nobody is queued; otherwise, or when try finds no room, the request
// waits in the queue until Release says a slot freed and the scheduler
// chooses it, and try runs again. Wait ends with the dispatch, with a
// *ShedError (the queue was full, the wait bound or the deadline passed, a
// higher class took its place) or with the caller's context error (the
// client went away: its place is released at once).
//
// Who goes next:
//   - Higher classes first (ClassHigh, ClassStandard, ClassLow), except that
//     every class below the top is guaranteed Options.MinShare of the
//     dispatches while it has requests waiting, so no class starves.
//   - Within a class, tenants share by weighted fair queuing (self-clocked:
//     each queued request of a tenant gets a virtual finish tag 1/weight
//     past the tenant's previous one or the class clock, whichever is
//     later); one tenant's burst queues behind its own earlier requests,
//     not in front of another tenant's.
//   - Within a tenant, the earliest deadline first; requests without one
//     after those with one, in arrival order.
//
// Who is shed first when the queue is full: a request of a lower class
// (the newest of the tenant with the most queued), else, within the
// arriving request's class, the newest of a tenant that has more than one
// request queued beyond the arriving tenant's count; otherwise the
// arriving request itself.
//
// The package knows nothing of HTTP or endpoints; the datapath counts its
// results and answers sheds with Retry-After: 503
// worker_overload_protection_shed on the proxy, 429 with the reason on the
// EPP's gRPC pick.
package flow
