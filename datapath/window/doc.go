// Package window is a per-endpoint admission window: at most Limit
// requests in flight on one endpoint at a time. A request over the window
// waits, bounded, for a slot and is shed when the bound passes (or at once
// with a zero bound), so an engine's running window is respected instead of
// piling requests into its queue — the way SMG protects a decode worker.
//
// It is one mechanism for every caller that needs it (P/D decodes, and
// engine-aware admission on single pools): a Window per endpoint, Acquire
// before the request is sent, the returned release when it ends. Waiting is
// FIFO, cancellable by the request's context, and counted by the caller
// from Acquire's result.
//
// A window's size may change at run time (SetLimit), as when it is learned
// from the engine and the engine restarts with another batch limit: slots
// already held are never taken back, a smaller window just admits no one
// until enough of them are released, and a larger one admits waiters at
// once. Waiters are served strictly first come, first served.
package window
