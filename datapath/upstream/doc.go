// Package upstream is infergate's transport to its engines: everything
// between "send this request to that endpoint" and the engine's response.
//
// Contract:
//   - Sender is the one seam. The single-pool proxy and every P/D dialect
//     send through it and know nothing of connections; a Leg names the
//     endpoint, method, target, header and body (in memory, or a
//     BodyStream copied through as the client sends it).
//   - Client is the Sender the datapath runs: an HTTP/1.1 client with a
//     keep-alive pool per endpoint and per TLS identity (NewTLS), the
//     exchange written and read on the caller's goroutine, idle connections
//     checked before reuse. A rule's TLS to its engines (security 2) rides
//     on each Leg, or on every leg of a Sender wrapped by WithTLS.
//   - A *DialError (NotSent) means the engine provably never received the
//     request: the connect or the TLS handshake failed. It is the only error
//     callers may retry elsewhere; anything else may have reached the engine
//     and LLM requests are not idempotent.
//   - A *ClientBodyError means the client's streamed body failed (or ran
//     over its cap): the client's fault, answered 4xx, never the engine's.
//   - Response bodies hand their connection back to the pool once read to
//     the end; closing one early closes the connection. Client bodies
//     implement BoundedBody, so a relay can bound engine silence with read
//     deadlines instead of timers.
//
// Nothing here imports the datapath or the dialects: the package sits below
// both (its only metric is the engine TLS handshake count).
package upstream
