package pd

import "sync"

// maxPooledBody bounds the leg-body buffers a bodyPool keeps: agent-sized
// prompts (hundreds of KB) are recycled, a rare multi-MB body is left to
// the collector rather than pinned in the pool.
const maxPooledBody = 4 << 20

// bodyPool recycles one dialect's prompt-sized leg-body buffers between
// requests, so a large prompt's legs are spliced into memory that is
// already mapped instead of a fresh allocation the runtime must zero and
// fault in. A nil *bodyPool allocates every time.
type bodyPool struct{ p sync.Pool }

// get returns an empty buffer of capacity at least n.
func (b *bodyPool) get(n int) []byte {
	if b != nil {
		if v, ok := b.p.Get().(*[]byte); ok && cap(*v) >= n {
			return (*v)[:0]
		}
	}
	return make([]byte, 0, n)
}

// put gives buf back. Only a buffer nothing reads any more may be put: a
// leg body once every send of it has returned (upstream.Sender writes the
// body before Send returns).
func (b *bodyPool) put(buf []byte) {
	if b == nil || cap(buf) == 0 || cap(buf) > maxPooledBody {
		return
	}
	b.p.Put(&buf)
}
