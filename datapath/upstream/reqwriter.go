package upstream

import (
	"io"
	"sync"
)

// Why not bufio.Writer: the last flush of a request waits inside the
// write for the engine's first byte (flushAwait), and a bufio.Writer
// cannot give its buffer back before Flush returns. reqWriter borrows its
// buffer only while it holds bytes and returns it as soon as they are
// out (sockio.Conn.ReleaseOnReplyWait), so streams waiting for their
// engines hold no request buffer: during a ramp of 1,000 SSE streams
// about 450 of them were holding one.

// reqWriter buffers one request for an engine connection in a buffer
// borrowed from pool (bufSize bytes), as bufio.Writer would, except that
// the buffer is borrowed at the first write and returned by release.
type reqWriter struct {
	buf  []byte  // the bytes held, in *bp
	bp   *[]byte // the borrowed buffer; nil: none
	pool *sync.Pool
	w    io.Writer
	err  error // a failed write's, returned by every later call
}

// grab borrows a buffer when w holds none.
func (w *reqWriter) grab() {
	if w.bp != nil {
		return
	}
	bp, _ := w.pool.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, bufSize)
		bp = &b
	}
	w.bp, w.buf = bp, (*bp)[:0]
}

// release returns the buffer (its bytes are out or dropped).
func (w *reqWriter) release() {
	if w.bp == nil {
		return
	}
	w.pool.Put(w.bp)
	w.bp, w.buf = nil, nil
}

// Write buffers p, flushing first when it does not fit; p as long as the
// buffer or longer goes to w.w directly, as bufio.Writer does.
func (w *reqWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.grab()
	if len(p) > cap(w.buf)-len(w.buf) {
		if err := w.Flush(); err != nil {
			return 0, err
		}
		if len(p) >= bufSize {
			n, err := w.w.Write(p)
			if err == nil && n < len(p) {
				err = io.ErrShortWrite
			}
			w.err = err
			return n, err
		}
		w.grab() // a flush that waited gave it back
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// WriteString is Write for a string, copied in as it fits (no conversion
// to a byte slice: that would allocate for each request's first write,
// which finds no buffer borrowed).
func (w *reqWriter) WriteString(s string) {
	for w.err == nil {
		w.grab()
		n := copy(w.buf[len(w.buf):cap(w.buf)], s)
		w.buf, s = w.buf[:len(w.buf)+n], s[n:]
		if len(s) == 0 || w.Flush() != nil {
			return
		}
	}
}

// writeField buffers the header field line "k: v\r\n": when it fits the
// borrowed buffer, appended with one check of the room instead of four
// WriteString calls (a request head is mostly such lines).
func (w *reqWriter) writeField(k, v string) {
	if w.err == nil && w.bp != nil && len(k)+len(v)+4 <= cap(w.buf)-len(w.buf) {
		w.buf = appendField(w.buf, k, v) // fits: never reallocates
		return
	}
	w.WriteString(k)
	w.WriteString(": ")
	w.WriteString(v)
	w.WriteString("\r\n")
}

// appendField appends the header field line "k: v\r\n" to b.
func appendField(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ':', ' ')
	return appendValue(b, v)
}

// appendValue appends a field line's value v and its end to b, which
// ends in the field's name and colon.
func appendValue(b []byte, v string) []byte {
	b = append(b, v...)
	return append(b, '\r', '\n')
}

// room borrows a buffer and reports whether n more bytes fit in it and no
// write has failed: the caller may then append up to n bytes to w.buf,
// which does not reallocate (one check for a run of appends).
func (w *reqWriter) room(n int) bool {
	if w.err != nil {
		return false
	}
	w.grab()
	return n <= cap(w.buf)-len(w.buf)
}

// WriteByte buffers one byte.
func (w *reqWriter) WriteByte(b byte) error {
	if w.err == nil && len(w.buf) == cap(w.buf) {
		if err := w.Flush(); err != nil {
			return err
		}
		w.grab()
	}
	if w.err != nil {
		return w.err
	}
	w.buf = append(w.buf, b)
	return nil
}

// AvailableBuffer is an empty slice over the buffer's free space, to
// append to and pass to Write (no copy when it fits).
func (w *reqWriter) AvailableBuffer() []byte {
	w.grab()
	return w.buf[len(w.buf):len(w.buf)]
}

// Flush writes the bytes held. With sockio's AwaitReply on, the write
// may return the buffer before its wait (release, through
// ReleaseOnReplyWait): w.buf is not read after it.
func (w *reqWriter) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	n, err := w.w.Write(w.buf)
	if err == nil && n < len(w.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
		return err
	}
	if w.bp != nil {
		w.buf = w.buf[:0]
	}
	return nil
}
