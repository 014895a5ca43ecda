// Package respclock times a response as the client receives it: the
// status, the bytes, when the first body byte was written (the client's
// time to first token for a stream) and, for server-sent events, when each
// event was completed, which gives the client's inter-token latency and
// time per output token without reading the events.
//
// It is a ResponseWriter wrapper the datapath installs before anything
// writes to the client, so every answer — relayed engine responses, P/D
// dialects, gateway errors — is timed the same way.
package respclock

import (
	"bytes"
	"net/http"
	"strings"
	"time"
)

// Gaps receives the time between two consecutive writes that each completed
// at least one server-sent event (one inter-token gap as the client sees it).
type Gaps interface {
	Gap(d time.Duration)
}

// FirstBytes receives the first body bytes written (the head of the
// answer, e.g. to read the model the engine names in it). It must not keep b.
type FirstBytes interface {
	FirstBytes(b []byte)
}

// Writer is the timing wrapper. The zero value is unusable: call Reset.
type Writer struct {
	http.ResponseWriter
	// Gaps, when set, gets every inter-event gap as it happens.
	Gaps Gaps
	// Head, when set, gets the first body bytes written.
	Head FirstBytes
	// Start, when set, is the request's start (with its monotonic
	// reading): Now is then *Start plus the monotonic time since, one
	// clock call instead of time.Now's two (wall and monotonic). A step
	// of the wall clock during the request is not seen, which suits
	// durations. (A pointer: the datapath's exchange, which holds this
	// writer and the start, stays in its size class.)
	Start *time.Time

	status int
	bytes  int64
	first  time.Time // first body byte written
	// lastIn is when the last write that completed an event was made, as
	// the time since Start (since first without a Start): a relayed
	// event's gap is then an integer subtraction (WriteIn).
	lastIn time.Duration
	events int // events completed (a blank line ends each)
	sse    bool
	nl     bool // the last byte written was '\n' (an event may end in the next write)
}

// Reset points w at rw and clears the timings and Start; Gaps and Head
// are kept.
func (w *Writer) Reset(rw http.ResponseWriter) {
	g, h := w.Gaps, w.Head
	*w = Writer{ResponseWriter: rw, Gaps: g, Head: h}
}

// Now is a clock reading for the request's timings (see Start).
func (w *Writer) Now() time.Time {
	if w.Start == nil || w.Start.IsZero() {
		return time.Now()
	}
	return w.Start.Add(time.Since(*w.Start))
}

// NowSince is Now and the time from Start to it (zero without a Start).
// Why: the datapath's latencies are those times, and the duration the
// reading was made from is exact (Now is Start plus it), so each is had
// without a Time.Sub (~30 instructions; a small request took four).
func (w *Writer) NowSince() (time.Time, time.Duration) {
	if w.Start == nil || w.Start.IsZero() {
		return time.Now(), 0
	}
	d := time.Since(*w.Start)
	return w.Start.Add(d), d
}

const contentTypeSSE = "text/event-stream"

// WriteHeader records the status and whether the body is an event stream
// (its Content-Type, looked up only for the first final status).
func (w *Writer) WriteHeader(code int) {
	w.WriteHeaderOf(code, w.status == 0 && code >= 200 && w.eventStream())
}

// WriteHeaderOf is WriteHeader for a caller that has read the
// Content-Type of the header about to be written: sse says whether it
// names an event stream. Why: the relay reads it to choose how to copy
// the body, and a second lookup in the same map here was ~160
// instructions of a small request (callgrind).
func (w *Writer) WriteHeaderOf(code int, sse bool) {
	if w.status == 0 && code >= 200 {
		w.status = code
		w.sse = sse
	}
	w.ResponseWriter.WriteHeader(code)
}

// FieldsWriter is a ResponseWriter that takes more fields for the head
// with its status, as name, value pairs written before its header map's
// (h1's writer): a proxy relays a head it parsed without a map between.
type FieldsWriter interface {
	WriteHeaderFields(code int, kv []string)
}

// TakesFields reports whether the wrapped writer is a FieldsWriter, so
// WriteHeaderFields may be called.
func (w *Writer) TakesFields() bool {
	_, ok := w.ResponseWriter.(FieldsWriter)
	return ok
}

// WriteHeaderFields is WriteHeaderOf with the head's fields kv for the
// wrapped writer, which must be a FieldsWriter (TakesFields); sse says
// whether kv's Content-Type names an event stream (it is not in the
// header map for WriteHeader to look up).
func (w *Writer) WriteHeaderFields(code int, sse bool, kv []string) {
	if w.status == 0 && code >= 200 {
		w.status = code
		w.sse = sse
	}
	w.ResponseWriter.(FieldsWriter).WriteHeaderFields(code, kv)
}

// eventStream reports a Content-Type of text/event-stream. The key is
// indexed as spelled: it is canonical, so Header.Get would find the same
// value after canonicalising it again on every response.
func (w *Writer) eventStream() bool {
	v := w.ResponseWriter.Header()["Content-Type"]
	return len(v) > 0 && strings.HasPrefix(v[0], contentTypeSSE)
}

// Write times the bytes as they go to the client.
func (w *Writer) Write(b []byte) (int, error) { return w.WriteAt(b, time.Time{}) }

// WriteAt is Write timed at now, a clock reading the caller took just
// before (zero: read the clock when needed). Why: the SSE relay reads the
// clock per event already, and a second read here was one more
// clock_gettime per relayed event.
func (w *Writer) WriteAt(b []byte, now time.Time) (int, error) {
	if w.status == 0 { // net/http's implicit 200
		w.status = http.StatusOK
		w.sse = w.eventStream()
	}
	n, err := w.ResponseWriter.Write(b)
	if n == 0 {
		return n, err
	}
	w.bytes += int64(n)
	if w.first.IsZero() {
		if now.IsZero() {
			now = w.Now()
		}
		w.first = now
		if w.Head != nil {
			w.Head.FirstBytes(b[:n])
		}
	}
	if w.sse {
		if k := eventEnds(b[:n], w.nl); k > 0 {
			if now.IsZero() {
				now = w.Now()
			}
			w.eventAt(k, w.since(now))
		}
		w.nl = b[n-1] == '\n'
	}
	return n, err
}

// HasStart reports whether Start is set, so WriteIn and Since may be
// used.
func (w *Writer) HasStart() bool { return w.Start != nil && !w.Start.IsZero() }

// Since is the time from Start to now: one clock read, as Now's. Start
// must be set (HasStart).
func (w *Writer) Since() time.Duration { return time.Since(*w.Start) }

// WriteIn is WriteAt with the reading as its time since Start (Since),
// which must be set (HasStart). Why: the SSE relay's clock per event is
// then one reading and integers (the stream bound takes it as a
// sockio.Mono): a time.Time made from it (~74 instructions) and the gap's
// Time.Sub (~30) are left out; only the first write builds its time.
// It repeats WriteAt's first lines rather than share a body with it: one
// body for both, told apart by a flag, cost 21–27 instructions an event
// more (callgrind, BenchmarkWriteInEvent).
func (w *Writer) WriteIn(b []byte, in time.Duration) (int, error) {
	if w.status == 0 { // net/http's implicit 200
		w.status = http.StatusOK
		w.sse = w.eventStream()
	}
	n, err := w.ResponseWriter.Write(b)
	if n == 0 {
		return n, err
	}
	w.bytes += int64(n)
	if w.first.IsZero() {
		w.first = w.Start.Add(in)
		if w.Head != nil {
			w.Head.FirstBytes(b[:n])
		}
	}
	if w.sse {
		if k := eventEnds(b[:n], w.nl); k > 0 {
			w.eventAt(k, in)
		}
		w.nl = b[n-1] == '\n'
	}
	return n, err
}

// eventAt counts k events completed by a write at in (the time since
// Start, or since first) and reports the gap from the last.
func (w *Writer) eventAt(k int, in time.Duration) {
	if w.events > 0 && w.Gaps != nil {
		w.Gaps.Gap(in - w.lastIn)
	}
	w.events += k
	w.lastIn = in
}

// since is now as the time since Start, or since first without one.
func (w *Writer) since(now time.Time) time.Duration {
	if w.HasStart() {
		return now.Sub(*w.Start)
	}
	return now.Sub(w.first)
}

// eventEnds counts the blank lines ("\n\n", CRLF included) in b; prevNL says
// the previous write ended in '\n'.
func eventEnds(b []byte, prevNL bool) int {
	// The common write, one event: its only line breaks are its last two
	// bytes, so it ends one event whatever came before it (a leading "\n"
	// or "\r\n" after prevNL is then part of that same blank line). One
	// look for a line break in the rest, none of the loop's slicing:
	// ~45 of ~135 instructions an event (callgrind).
	if n := len(b); n >= 2 && b[n-1] == '\n' && b[n-2] == '\n' && bytes.IndexByte(b[:n-2], '\n') < 0 {
		return 1
	}
	k := 0
	if prevNL {
		switch {
		case b[0] == '\n':
			k, b = 1, b[1:]
		case len(b) > 1 && b[0] == '\r' && b[1] == '\n':
			k, b = 1, b[2:]
		}
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		b = b[i+1:]
		switch {
		case len(b) > 0 && b[0] == '\n':
			k++
			b = b[1:]
		case len(b) > 1 && b[0] == '\r' && b[1] == '\n':
			k++
			b = b[2:]
		}
	}
	return k
}

// Flush passes flushes through.
func (w *Writer) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status is the status sent (0: nothing yet).
func (w *Writer) Status() int { return w.status }

// Bytes is the body bytes written.
func (w *Writer) Bytes() int64 { return w.bytes }

// First is when the first body byte was written (zero: none).
func (w *Writer) First() time.Time { return w.first }

// Events is the number of server-sent events completed (0 for other bodies).
func (w *Writer) Events() int { return w.events }

// Streamed reports an event-stream response.
func (w *Writer) Streamed() bool { return w.sse }

// EventSpan is the time from the first body byte to the last completed
// event: the decode time a stream's tokens after the first took.
func (w *Writer) EventSpan() time.Duration {
	if w.events == 0 || w.first.IsZero() {
		return 0
	}
	return w.lastIn - w.since(w.first)
}
