// Package sockio reads and writes one connection of the datapath's
// plaintext HTTP/1.1 legs (the lean front end's client connections and the
// engine-side client's connections) with what both need below
// a bufio buffer:
//
//   - Lazy read deadlines. A kept-alive connection asks for a new read
//     deadline at every turn (the idle wait, a body's read bound, a
//     relay's idle bound moved forward per event), and every socket
//     deadline change is a runtime timer update under the descriptor's
//     lock. The socket keeps the deadline it has while the one asked for
//     is later (or none); a read that times out on the earlier one re-arms
//     the one asked for and reads on. Requests arriving within the armed
//     bound, and streams whose events keep coming, then cost no timer
//     update; a nearer bound is set at once.
//
//   - Raw socket calls (Linux). Reads and writes of a plaintext TCP socket
//     go through its syscall.RawConn with read(2) and write(2) issued
//     without the runtime's syscall bookkeeping: the socket is
//     non-blocking, so a call never blocks (EAGAIN waits on the poller as
//     net.Conn does), and the bookkeeping only costs — it marks the
//     processor as in a system call, and the runtime's monitor thread,
//     woken by it, hands a processor that stays there past its 20 µs tick
//     to another thread. Deadlines, Close and the poller behave as with
//     net.Conn's own Read and Write.
//
//   - Serving inside the read wait (Hold). A connection that is read,
//     answered and read again finds its socket empty at the start of every
//     wait, because the runtime forgets readiness when a read call begins.
//     Hold keeps one syscall.RawConn.Read open across a caller's turns, so
//     a wait after a read that emptied the socket needs no read to start
//     and misses nothing that arrived since (nginx's edge-triggered shape).
//     Reads and writes in a turn go straight to the held descriptor: they
//     meet the deadlines only when they would wait, a Close elsewhere only
//     once the turn ends (the descriptor stays open until then), and a
//     Write after Abort writes nothing.
//
//   - A request written from inside the wait for its reply (AwaitReply).
//     The last write of an engine request is made from a read-side
//     callback, so its wait needs no read that finds the socket empty;
//     the request buffer can be given back as the wait begins
//     (ReleaseOnReplyWait), and the reply's first bytes read in place at
//     its end (ReadOnReply), without a read call of their own.
package sockio
