package epp

import (
	"net/http"
	"sync/atomic"
	"time"
)

// Refusal reasons of the process-wide bounds (docs/epp.md, "Memory and
// stream bounds").
const (
	// ReasonBodyMemory: taking this stream's body would put the bodies all
	// streams hold past Options.BodyBudgetBytes.
	ReasonBodyMemory = "body_memory_exhausted"
	// ReasonTooManyStreams: Options.MaxStreams streams are open already.
	ReasonTooManyStreams = "too_many_streams"
)

// boundsRetryAfter is the retry-after of a refusal by the process-wide
// bounds: both free up as other streams end, usually within a request's
// time, so the client is told to come back soon rather than given up on.
const boundsRetryAfter = time.Second

// budget is a process-wide allowance shared by every stream of a Server:
// the bytes of request body they hold, or the streams open. Each holder
// takes what it needs before it allocates or runs and gives back exactly
// what it took, so the sum never passes the limit (a take that would is
// refused, not queued: waiting would hold a stream's goroutine and
// whatever gRPC has buffered for it).
type budget struct {
	limit int64 // <= 0: no limit
	used  atomic.Int64
}

// take reserves n (>= 0) and reports whether it fitted.
func (b *budget) take(n int64) bool {
	if b.limit <= 0 {
		b.used.Add(n)
		return true
	}
	for {
		cur := b.used.Load()
		if cur+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// give returns n taken earlier.
func (b *budget) give(n int64) { b.used.Add(-n) }

// inUse is what is taken now.
func (b *budget) inUse() int64 { return b.used.Load() }

// bodyMemoryRefusal and tooManyStreamsRefusal are the answers of the two
// bounds: 429, like a shed, because nothing is wrong with the request and
// it will fit once other streams have ended (413 would tell the client its
// request is too large, which it is not).
func bodyMemoryRefusal() *Refusal {
	return &Refusal{Status: http.StatusTooManyRequests, Reason: ReasonBodyMemory, RetryAfter: boundsRetryAfter}
}

func tooManyStreamsRefusal() *Refusal {
	return &Refusal{Status: http.StatusTooManyRequests, Reason: ReasonTooManyStreams, RetryAfter: boundsRetryAfter}
}

// growBody makes room for n more bytes in a body held as buf (whose
// capacity is all reserved already) and returns the new buffer, its
// contents copied, or nil when the budget refuses the growth. The
// capacity grows by half (a body arriving in many chunks is copied
// O(log n) times, and growing by half leaves at most a third of what it
// reserves as slack; a presize to want may leave more), never below want
// nor past limit; every byte of capacity is reserved before it is
// allocated, so the budget counts what the heap holds.
func growBody(b *budget, buf []byte, n, want, limit int) []byte {
	need := len(buf) + n
	size := max(min(max(cap(buf)+cap(buf)/2, want), limit), need)
	if !b.take(int64(size - cap(buf))) {
		return nil
	}
	return append(make([]byte, 0, size), buf...)
}
