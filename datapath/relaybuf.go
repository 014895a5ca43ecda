package datapath

import (
	"net/http"
	"sync"

	"github.com/infergate/infergate/datapath/h1"
	"github.com/infergate/infergate/datapath/upstream"
)

// relayBuf lends the relay one of the runtime's pooled buffers. For an SSE
// stream whose engine body can wait for readiness without a buffer
// (upstream.ReadWaiter), the buffer goes back to the pool while the engine
// is silent: an open stream then holds no relay buffer between events,
// and the streams of a gateway share the few that are in use at once.
type relayBuf struct {
	pool *sync.Pool // of *[]byte
	bp   *[]byte    // the buffer lent, nil between events
	wait upstream.ReadWaiter
}

// get returns the buffer, borrowing one when none is lent.
func (r *relayBuf) get() []byte {
	if r.bp == nil {
		r.bp = r.pool.Get().(*[]byte)
	}
	return *r.bp
}

// getFrom is get that first asks lender, the client's writer (nil: ask
// none), for the free room of its write buffer (h1.BodyRoom), while no
// buffer was borrowed: the relay reads the engine's body straight into
// it, and its write of what it read commits the bytes in place. A small
// answer's body then makes no pool round trip and one copy fewer (~110
// instructions a request, callgrind: docs/performance.md, session 19).
// The relay must write to the client only what it read into the room,
// right after the read. Once the room is full, or when none is lent, the
// pooled buffer serves the rest of the body. (lender is an argument, not
// a field: relayBuf rides in sseStream, which fills its cache lines.)
func (r *relayBuf) getFrom(lender http.ResponseWriter) []byte {
	if r.bp == nil && lender != nil {
		if room := h1.BodyRoom(lender); len(room) > 0 {
			return room
		}
	}
	return r.get()
}

// idle is called once what was read has been written: a waiting relay
// returns the buffer and waits for the engine's next bytes.
func (r *relayBuf) idle() {
	if r.wait == nil {
		return
	}
	r.release()
	r.wait.WaitReadable()
}

// release returns the buffer to the pool.
func (r *relayBuf) release() {
	if r.bp != nil {
		r.pool.Put(r.bp)
		r.bp = nil
	}
}
