package datapath

import (
	"sync"

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
