package tenant

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/infergate/infergate/jsonscan"
)

// Metering reads the engine's own usage from the response the client gets,
// so every path (single pool, each P/D dialect's final leg) is metered once,
// on what the client was served.

const (
	// meterTail is how much of the end of a response is kept to find its
	// usage object: OpenAI-style engines put usage last (a JSON body's last
	// member, a stream's last data event before [DONE]).
	meterTail = 8 << 10
	// maxPendingEvent bounds one buffered SSE event while the hidden usage
	// chunk is filtered; a longer event is passed through unfiltered.
	maxPendingEvent = 64 << 10
)

// UsageWriter wraps the client's ResponseWriter: it remembers the tail of
// what is written, and with HideUsageChunk it removes the usage-only SSE
// event (choices: [] plus usage) that the gateway asked the engine for on
// the client's behalf (stream_options.include_usage).
type UsageWriter struct {
	http.ResponseWriter
	hide    bool
	tail    []byte // last meterTail bytes written (or seen, when hidden)
	pending []byte // an SSE event not yet complete (hide mode)
	hidden  []byte // the usage event removed from the stream
	status  int
}

// NewUsageWriter wraps w; hide removes the usage-only stream event.
func NewUsageWriter(w http.ResponseWriter, hide bool) *UsageWriter {
	return &UsageWriter{ResponseWriter: w, hide: hide}
}

// WriteHeader records the status.
func (u *UsageWriter) WriteHeader(code int) {
	u.status = code
	u.ResponseWriter.WriteHeader(code)
}

// Status is the status written (0 before WriteHeader; 200 after a bare
// Write).
func (u *UsageWriter) Status() int { return u.status }

// Flush forwards to the client's writer.
func (u *UsageWriter) Flush() {
	if f, ok := u.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the client's writer.
func (u *UsageWriter) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// remember keeps at least the last meterTail bytes written. It compacts
// only when twice that has piled up, so a stream of small events costs an
// append each, not a meterTail-sized move per event.
func (u *UsageWriter) remember(b []byte) {
	if len(b) >= meterTail {
		u.tail = append(u.tail[:0], b[len(b)-meterTail:]...)
		return
	}
	if len(u.tail)+len(b) > 2*meterTail {
		keep := meterTail - len(b)
		u.tail = append(u.tail[:0], u.tail[len(u.tail)-keep:]...)
	}
	u.tail = append(u.tail, b...)
}

// Write forwards b, minus the hidden usage event.
func (u *UsageWriter) Write(b []byte) (int, error) {
	if u.status == 0 {
		u.status = http.StatusOK
	}
	u.remember(b)
	if !u.hide {
		return u.ResponseWriter.Write(b)
	}
	u.pending = append(u.pending, b...)
	out := u.pending[:0:0]
	for {
		i := bytes.Index(u.pending, []byte("\n\n"))
		if i < 0 {
			break
		}
		ev := u.pending[:i+2]
		if isUsageOnlyEvent(ev) {
			u.hidden = append(u.hidden[:0], ev...)
		} else {
			out = append(out, ev...)
		}
		u.pending = u.pending[i+2:]
	}
	if len(u.pending) > maxPendingEvent { // not an event stream after all
		out = append(out, u.pending...)
		u.pending = nil
		u.hide = false
	}
	u.pending = append([]byte(nil), u.pending...)
	if len(out) > 0 {
		if _, err := u.ResponseWriter.Write(out); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// Close writes whatever incomplete event is still held.
func (u *UsageWriter) Close() {
	if len(u.pending) > 0 {
		_, _ = u.ResponseWriter.Write(u.pending)
		u.pending = nil
	}
}

// isUsageOnlyEvent is the final chunk include_usage adds: a data event whose
// object has an empty choices array and a usage object.
func isUsageOnlyEvent(ev []byte) bool {
	d, ok := bytes.CutPrefix(bytes.TrimSpace(ev), []byte("data:"))
	if !ok {
		return false
	}
	var v struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *usage            `json:"usage"`
	}
	if json.Unmarshal(bytes.TrimSpace(d), &v) != nil {
		return false
	}
	return v.Usage != nil && v.Choices != nil && len(v.Choices) == 0
}

type usage struct {
	PromptTokens     *int `json:"prompt_tokens"`
	CompletionTokens *int `json:"completion_tokens"`
}

// Usage returns the engine-reported token counts of the response, if any:
// the last "usage" object in what was written (or hidden).
func (u *UsageWriter) Usage() (prompt, completion int, ok bool) {
	for _, src := range [][]byte{u.hidden, u.tail} {
		if p, c, ok := lastUsage(src); ok {
			return p, c, true
		}
	}
	return 0, 0, false
}

// Fields of the engine's usage object metering reads.
const (
	fieldPromptTokens     = "prompt_tokens"
	fieldCompletionTokens = "completion_tokens"
)

// lastUsage finds the last `"usage":{…}` object in b and reads its token
// counts from its members (jsonscan, loose: the tail may start mid-event, so
// the object is found by its name, then walked; no decoding of the rest).
// Members before a malformed spot still count.
func lastUsage(b []byte) (int, int, bool) {
	key := []byte(`"usage"`)
	for end := len(b); end > 0; {
		i := bytes.LastIndex(b[:end], key)
		if i < 0 {
			return 0, 0, false
		}
		end = i
		j := jsonscan.SkipSpace(b, i+len(key))
		if j >= len(b) || b[j] != ':' {
			continue
		}
		j = jsonscan.SkipSpace(b, j+1)
		if j >= len(b) || b[j] != '{' {
			continue
		}
		p, c, okP, okC := 0, 0, false, false
		for it := jsonscan.ObjectMembers(b, j, jsonscan.Loose); it.Next(); {
			m := it.Member()
			switch {
			case !okP && m.KeyIs(b, fieldPromptTokens):
				p, okP = tokenCount(m.Value.Of(b))
			case !okC && m.KeyIs(b, fieldCompletionTokens):
				c, okC = tokenCount(m.Value.Of(b))
			}
		}
		if okP {
			return p, c, true
		}
	}
	return 0, 0, false
}

// tokenCount reads the non-negative integer a count starts with (at most 12
// digits: no engine counts a trillion tokens in one response).
func tokenCount(v []byte) (int, bool) {
	n, digits := 0, 0
	for ; digits < len(v) && digits < 12 && v[digits] >= '0' && v[digits] <= '9'; digits++ {
		n = n*10 + int(v[digits]-'0')
	}
	return n, digits > 0
}

// RequestShape is what metering needs from a request body.
type RequestShape struct {
	Stream        bool
	IncludeUsage  bool // the client asked for stream usage itself
	StreamOptions bool // stream_options present
	MaxTokens     int  // max_tokens, max_completion_tokens or max_output_tokens
}

// Shape builds the metering shape from a body's raw top-level members (as a
// top-level scan returns them; nil when absent): only these few bytes are
// decoded, never the prompt.
func Shape(stream, streamOptions, maxTokens []byte) RequestShape {
	s := RequestShape{Stream: string(stream) == "true", StreamOptions: len(streamOptions) > 0 && string(streamOptions) != "null"}
	if s.StreamOptions {
		var o struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if json.Unmarshal(streamOptions, &o) == nil {
			s.IncludeUsage = o.IncludeUsage
		}
	}
	if n, err := strconv.Atoi(string(maxTokens)); err == nil && n > 0 {
		s.MaxTokens = n
	}
	return s
}

// AskForUsage returns body with stream_options.include_usage set, for a
// streaming request that has no stream_options (else body unchanged, ok
// false: the stream is then metered from usage if the engine sends it, or
// settled on the reservation).
func AskForUsage(body []byte, s RequestShape) ([]byte, bool) {
	if !s.Stream || s.StreamOptions {
		return body, false
	}
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return body, false
	}
	const member = `"stream_options":{"include_usage":true},`
	out := make([]byte, 0, len(body)+len(member))
	out = append(out, body[:i+1]...)
	out = append(out, member...)
	out = append(out, body[i+1:]...)
	return out, true
}
