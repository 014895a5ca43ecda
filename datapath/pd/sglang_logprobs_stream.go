package pd

import (
	"bytes"
	"context"
	"net/http"
)

// mergeStream relays a streamed decode 200 of a logprobs request: it waits
// for the prefill's body (already in pres, or on prefCh up to
// PrefillTimeout) before the decode's first byte goes out, then relays the
// stream with the prefill's input logprobs prepended to every event that
// carries meta_info.input_token_logprobs. Events without the array, and a
// whole stream when the prefill has none, pass through byte for byte. It
// returns the prefill result if it consumed it from prefCh.
func (q sgSeq) mergeStream(ctx context.Context, p peek, pres *sgPrefill, prefCh <-chan sgPrefill, buf []byte, cancel context.CancelFunc) (*sgPrefill, relayResult) {
	pres, gone := q.awaitPrefill(ctx, pres, prefCh)
	if gone {
		p.resp.Body.Close()
		return pres, relayResult{clientGone: true}
	}
	var pe []byte
	if pres != nil && pres.err == nil && pres.status == http.StatusOK {
		pe = prefillInputLogprobs(pres.body)
	}
	if len(pe) == 0 {
		return pres, q.relay(p, buf, cancel)
	}
	lw := &logprobEventWriter{ResponseWriter: q.w, prefill: pe}
	rq := *q.seq
	rq.w = lw
	rr := rq.relay(p, buf, cancel)
	if !rr.clientGone {
		lw.end()
	}
	return pres, rr
}

// prefillInputLogprobs is the inside of the prefill's
// meta_info.input_token_logprobs array ("" when it has none): from a JSON
// body, or from the first data event of an SSE body that carries a
// non-empty one (SGLang's prefill keeps the client's stream flag).
func prefillInputLogprobs(body []byte) []byte {
	if _, _, a, ok := inputLogprobs(body); ok {
		e, _ := arrayElems(a)
		return e
	}
	for rest := body; len(rest) > 0; {
		var ev []byte
		ev, rest = nextEvent(rest)
		if d, ok := eventData(ev); ok {
			if _, _, a, ok := inputLogprobs(d); ok {
				if e, _ := arrayElems(a); len(e) > 0 {
					return e
				}
			}
		}
	}
	return nil
}

// logprobEventWriter rewrites an SSE stream event by event: each complete
// event whose single data line is a JSON object with
// meta_info.input_token_logprobs gets prefill prepended to that array.
// Bytes of an event not yet complete are held until its blank line (or
// the end of the relay); everything else is written as it came.
type logprobEventWriter struct {
	http.ResponseWriter
	prefill []byte // the prefill array's elements
	pending []byte // the start of an event whose end has not arrived
}

// WriteHeader drops the engine's Content-Length: rewritten events change
// the body's length.
func (lw *logprobEventWriter) WriteHeader(status int) {
	lw.Header().Del("Content-Length")
	lw.ResponseWriter.WriteHeader(status)
}

func (lw *logprobEventWriter) Write(b []byte) (int, error) {
	lw.pending = append(lw.pending, b...)
	var out []byte
	for {
		end := eventEnd(lw.pending)
		if end < 0 {
			break
		}
		ev := lw.pending[:end]
		if m, ok := lw.merge(ev); ok {
			out = append(out, m...)
		} else {
			out = append(out, ev...)
		}
		lw.pending = lw.pending[end:]
	}
	if len(lw.pending) == 0 {
		lw.pending = nil
	} else {
		lw.pending = append([]byte(nil), lw.pending...) // do not pin the relay's buffer
	}
	if len(out) > 0 {
		if _, err := lw.ResponseWriter.Write(out); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// Flush sends what is written; a held partial event stays held.
func (lw *logprobEventWriter) Flush() { _ = http.NewResponseController(lw.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the client's writer.
func (lw *logprobEventWriter) Unwrap() http.ResponseWriter { return lw.ResponseWriter }

// end writes a trailing event that never got its blank line, unchanged.
func (lw *logprobEventWriter) end() {
	if len(lw.pending) > 0 {
		_, _ = lw.ResponseWriter.Write(lw.pending)
		lw.pending = nil
		lw.Flush()
	}
}

// merge rewrites one complete event (with its terminating blank line).
func (lw *logprobEventWriter) merge(ev []byte) ([]byte, bool) {
	at, n, ok := eventDataAt(ev)
	if !ok {
		return nil, false
	}
	m, ok := prependInputLogprobs(lw.prefill, ev[at:at+n])
	if !ok {
		return nil, false
	}
	out := make([]byte, 0, len(ev)+len(m)-n)
	out = append(out, ev[:at]...)
	out = append(out, m...)
	return append(out, ev[at+n:]...), true
}

// eventEnd is the index just past the first event's terminating blank line
// in b ("\n\n" or "\r\n\r\n"), or -1 when b holds no complete event.
func eventEnd(b []byte) int {
	i := bytes.Index(b, []byte("\n\n"))
	j := bytes.Index(b, []byte("\r\n\r\n"))
	switch {
	case i < 0 && j < 0:
		return -1
	case j >= 0 && (i < 0 || j < i):
		return j + 4
	}
	return i + 2
}

// nextEvent splits the first event off b (all of b when none ends).
func nextEvent(b []byte) (ev, rest []byte) {
	if end := eventEnd(b); end >= 0 {
		return b[:end], b[end:]
	}
	return b, nil
}

// eventData is the payload of an event's one data line ("data:" with or
// without its space); ok is false for events with no data line or several
// (a multi-line payload is left as the engine sent it), and for payloads
// that are not JSON objects.
func eventData(ev []byte) (data []byte, ok bool) {
	at, n, ok := eventDataAt(ev)
	if !ok {
		return nil, false
	}
	return ev[at : at+n], true
}

// eventDataAt is eventData as an offset and length into ev.
func eventDataAt(ev []byte) (at, n int, ok bool) {
	for off := 0; off < len(ev); {
		line := ev[off:]
		next := len(ev)
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line, next = line[:i], off+i+1
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if d, isData := bytes.CutPrefix(line, []byte("data:")); isData {
			if ok {
				return 0, 0, false
			}
			skip := len(line) - len(d)
			if len(d) > 0 && d[0] == ' ' {
				skip++
			}
			at, n, ok = off+skip, len(line)-skip, true
		}
		off = next
	}
	if ok && (n == 0 || ev[at] != '{') {
		return 0, 0, false
	}
	return at, n, ok
}
