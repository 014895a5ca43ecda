// Package rawsock issues read(2), write(2), writev(2) and a peeking recv(2) on a
// non-blocking socket without the runtime's syscall bookkeeping. The
// datapath's socket layer (datapath/sockio) and the engine scraper
// (enginestats) both read and write that way, and keep one copy of the
// calls here.
//
// Why: a call on a non-blocking socket never blocks (EAGAIN instead), so
// the bookkeeping of syscall.Syscall buys nothing, and it costs: it marks
// the processor as in a system call, and the runtime's monitor thread,
// woken by it, hands a processor that stays there past its 20 µs tick to
// another thread (see "Engine metric scrapes" in docs/performance.md).
// The caller must know its descriptor is non-blocking: a blocking one
// would hold its thread, its processor and any stop-the-world pause of
// the whole process until the peer answers.
//
// The calls do not tell the race detector that a write to a socket happens
// before the read of it (syscall.Read and syscall.Write do); callers whose
// tests hand data over a socket between goroutines use them only outside
// -race builds.
package rawsock
