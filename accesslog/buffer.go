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
// Write from the writer's own goroutine.
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

// bufWriter batches whole lines to out.
type bufWriter struct {
	out     io.Writer
	size    int           // flush when the next line would not fit
	every   time.Duration // flush a line at most this long after it was buffered
	dropped Counter       // nil: not counted

	mu       sync.Mutex
	buf      []byte        // lines not yet handed to the writer goroutine
	spare    []byte        // the other buffer, when the writer goroutine holds none
	inflight bool          // a buffer is handed over and not yet written
	armed    bool          // timer will flush buf
	closed   bool          // Close began: lines go straight to out
	timer    *time.Timer   // flush by time (runs tick)
	full     chan []byte   // buffers to write, oldest first; closed by Close
	done     chan struct{} // closed when the writer goroutine has written everything
}

// newBufWriter starts the writer goroutine of a size-byte buffer flushed
// every interval; Close stops it.
func newBufWriter(out io.Writer, size int, every time.Duration, dropped Counter) *bufWriter {
	w := &bufWriter{
		out:     out,
		size:    size,
		every:   every,
		dropped: dropped,
		// Room for the buffer being written and Close's last one: a
		// hand-over never blocks (only one is in flight at a time).
		full: make(chan []byte, 2),
		done: make(chan struct{}),
	}
	w.timer = time.AfterFunc(time.Hour, w.tick)
	w.timer.Stop()
	go w.run()
	return w
}

// run writes the buffers handed over, in order, until Close.
func (w *bufWriter) run() {
	defer close(w.done)
	for p := range w.full {
		_, _ = w.out.Write(p)
		w.mu.Lock()
		w.spare, w.inflight = p[:0], false
		w.mu.Unlock()
	}
}

// writeLine buffers one whole line; write it out straight once closed.
// A line longer than the buffer is buffered alone.
func (w *bufWriter) writeLine(line []byte) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		_, _ = w.out.Write(line)
		return
	}
	if len(w.buf) > 0 && len(w.buf)+len(line) > w.size {
		if w.inflight {
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

// handOverLocked gives buf to the writer goroutine and starts filling the
// spare. Callers have checked that no buffer is in flight.
func (w *bufWriter) handOverLocked() {
	w.full <- w.buf
	w.inflight = true
	w.buf, w.spare = w.spare, nil
}

// tick flushes what the buffer holds when the interval passed; while a
// write is still in flight it looks again an interval later.
func (w *bufWriter) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	switch {
	case w.closed || len(w.buf) == 0:
	case w.inflight:
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

// Close hands over what is buffered, stops the timer and the writer
// goroutine, and waits, up to ctx, for the last lines to be written; after
// it lines are written one Write each, as unbuffered. A second Close
// waits the same way.
func (w *bufWriter) Close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		w.timer.Stop()
		w.armed = false
		if len(w.buf) > 0 {
			w.full <- w.buf // room: at most one other is queued
			w.buf = nil
		}
		close(w.full)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("access log: writing the last lines: %w", ctx.Err())
	}
}
