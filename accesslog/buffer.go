package accesslog

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// The buffered writer is nginx's `access_log … buffer=size flush=time`:
// a request appends its rendered line to a shared buffer under a short
// lock (a copy of a few hundred bytes) instead of taking the output's lock
// for a write(2) of its own, which the connections' lines queued for, each
// park and wake-up of a contended lock included. A full buffer, or one
// whose oldest line is a flush interval old, goes to the output in one
// Write, off the request: by a goroutine started for that write.
//
// Whole lines only: a buffer holds whole lines and is written in one
// Write, which an *os.File (the daemon's stderr, a log file) takes whole
// against logrus's own lines on the same file, since it serializes its
// Writes. Access lines then reach the output up to a flush interval after
// the daemon's other lines of the same moment; each carries its own time.
//
// A stalled output (a pipe nobody reads) must not stall requests: memory
// is bounded to two buffers — the one being written and the one filling —
// and a line that finds the filling one full while the other is still
// being written is dropped and counted, never waited for.

// Counter counts dropped lines; a prometheus.Counter is one.
type Counter interface{ Inc() }

// bufWriter batches whole lines to out. It keeps no goroutine of its own:
// a full or due buffer is written by a goroutine started for that write
// (one per buffer, at most one at a time), and the interval by a timer
// armed while lines wait, so an idle or unclosed writer holds nothing.
type bufWriter struct {
	out     io.Writer
	size    int           // flush when the next line would not fit
	every   time.Duration // flush a line at most this long after it was buffered
	dropped Counter       // nil: not counted

	mu     sync.Mutex
	buf    []byte        // lines not yet handed to a write
	spare  []byte        // the other buffer, when no write holds it
	wrote  chan struct{} // closed when the write in flight ends; nil: none
	armed  bool          // the timer will flush buf
	closed bool          // Close began: lines go straight to out
	last   chan struct{} // closed when Close's last write ended
	timer  *time.Timer   // flush by time (runs tick)
}

// newBufWriter returns a writer of size-byte buffers flushed every
// interval; Close writes what is left.
func newBufWriter(out io.Writer, size int, every time.Duration, dropped Counter) *bufWriter {
	w := &bufWriter{out: out, size: size, every: every, dropped: dropped}
	w.timer = time.AfterFunc(time.Hour, w.tick)
	w.timer.Stop()
	return w
}

// writeLine buffers one whole line; once closed, it writes it straight.
// A line longer than the buffer is buffered alone.
func (w *bufWriter) writeLine(line []byte) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		_, _ = w.out.Write(line)
		return
	}
	if len(w.buf) > 0 && len(w.buf)+len(line) > w.size {
		if w.wrote != nil {
			w.mu.Unlock()
			w.drop()
			return
		}
		w.handOverLocked()
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, w.size)
	}
	w.buf = append(w.buf, line...)
	if !w.armed {
		w.armed = true
		w.timer.Reset(w.every)
	}
	w.mu.Unlock()
}

// handOverLocked starts the write of buf and starts filling the spare.
// Callers have checked that no write is in flight.
func (w *bufWriter) handOverLocked() {
	p, done := w.buf, make(chan struct{})
	w.buf, w.spare, w.wrote = w.spare, nil, done
	go func() {
		defer close(done)
		_, _ = w.out.Write(p)
		w.mu.Lock()
		w.spare, w.wrote = p[:0], nil
		w.mu.Unlock()
	}()
}

// tick flushes what the buffer holds when the interval passed; while a
// write is still in flight it looks again an interval later.
func (w *bufWriter) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	switch {
	case w.closed || len(w.buf) == 0:
	case w.wrote != nil:
		w.armed = true
		w.timer.Reset(w.every)
	default:
		w.handOverLocked()
	}
}

func (w *bufWriter) drop() {
	if w.dropped != nil {
		w.dropped.Inc()
	}
}

// Close stops the timer and writes what is buffered after the write in
// flight, waiting up to ctx; after it lines are written one Write each, as
// unbuffered. A second Close waits for the same last write.
func (w *bufWriter) Close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		w.timer.Stop()
		w.armed = false
		rest, inFlight, last := w.buf, w.wrote, make(chan struct{})
		w.buf, w.last = nil, last
		go func() {
			defer close(last)
			if inFlight != nil {
				<-inFlight
			}
			if len(rest) > 0 {
				_, _ = w.out.Write(rest)
			}
		}()
	}
	last := w.last
	w.mu.Unlock()
	select {
	case <-last:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("access log: writing the last lines: %w", ctx.Err())
	}
}
