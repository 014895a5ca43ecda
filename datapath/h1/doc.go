// Package h1 is a lean HTTP/1.1 server for plaintext listeners: it parses
// requests itself and hands each one, as an *http.Request with a cheap
// http.ResponseWriter, to an ordinary http.Handler.
//
// Why not net/http's server: on a proxy whose handler is a few microseconds
// of routing, net/http's per-request machinery is most of the cost (the
// request parsed through textproto into freshly grown maps, a background
// read started and aborted around every handler, the response header
// cloned and sorted, a second goroutine per open stream). Here one
// goroutine per connection reads the head straight from its buffer, cuts
// every string from one allocation, and writes the response head itself.
//
// Contract:
//   - Framing is RFC 9112 and strict: a request with both Content-Length
//     and Transfer-Encoding, a duplicate or non-numeric Content-Length, a
//     transfer coding other than chunked, obs-fold, a bare LF or CR, a
//     control byte in a header, a missing or duplicate Host, or a line or
//     head over its limit is answered 4xx/5xx and the connection closed.
//     Nothing after a refused head is ever parsed as a request.
//   - The handler sees what net/http would give it: Method, URL, Proto,
//     Header (canonical keys, without Host and Transfer-Encoding), Host,
//     ContentLength (-1 chunked), TransferEncoding, Close, RemoteAddr,
//     RequestURI and a Body. The ResponseWriter is an http.Flusher and
//     answers http.ResponseController's SetReadDeadline, SetWriteDeadline
//     and Flush. Expect: 100-continue is answered on the first body read.
//   - As with net/http, nothing may use the request or the ResponseWriter
//     once the handler has returned: the connection empties their header
//     maps and hands them to its next request and response, and the
//     request's state (request, URL, body, writer and the handler's
//     Scratch) goes back to a pool once the response is written (under
//     -race it is poisoned instead, so a late use fails: recycle.go).
//   - Client disconnects cancel the request's context without a second
//     goroutine: a request running longer than a few tens of milliseconds
//     has its socket registered, once per connection, with an epoll set
//     (a Watcher, which several servers may share) that reports the
//     peer's FIN or RST (watch_linux.go). Off Linux a departure is seen on
//     the next write.
//   - Each request's context is its connection's: it ends when the client
//     goes away or the connection closes, not when the handler returns.
//   - A panic of http.ErrAbortHandler cuts the connection (a truncated
//     response never looks complete); other panics are logged and do the
//     same.
//   - On a plaintext TCP socket with raw calls (Linux, outside -race) the
//     connection's loop runs inside the socket's read wait
//     (sockio.Conn.Hold): a request whose head and body are whole in the
//     read buffer is handled and answered there, and the wait for the next
//     one starts without a read that finds the socket empty, while
//     readiness that came in during the handler (a pipelined request) is
//     kept; a client's FIN that came with its last request is learnt
//     from the server's hang-up watcher (EPOLLRDHUP), since the readiness
//     that reported the request reported it too. A request that needs
//     reads of its own (a head not yet whole, a
//     body not all buffered, chunked coding) ends the wait and is served
//     as elsewhere. The descriptor's read lock is held meanwhile, so Close
//     shuts such a connection down and ends its context instead of waiting
//     for its handler.
//   - TLS and HTTP/2 are not served here: they stay on crypto/tls and
//     net/http.
package h1
