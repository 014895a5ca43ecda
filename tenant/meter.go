package tenant

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

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
	StreamOptions bool // stream_options present and not null
	// MaxTokens is the largest completion ceiling the client set
	// (max_tokens, max_completion_tokens, max_output_tokens; 0: none): an
	// engine honours one of them, the reservation must cover whichever.
	MaxTokens int
	// Choices is how many completions the engine generates: the largest of
	// n and best_of, at least 1.
	Choices int
}

// BodyFields are the raw top-level members of a request body that metering
// reads (nil when absent), as a top-level scan that decodes member names
// returns them.
type BodyFields struct {
	Stream, StreamOptions                           []byte
	MaxTokens, MaxCompletionTokens, MaxOutputTokens []byte
	N, BestOf                                       []byte
}

// Wire names metering reads and writes inside stream_options.
const (
	fieldStreamOptions = "stream_options"
	fieldIncludeUsage  = "include_usage"
)

// maxCount bounds a ceiling or a choice count read from a body, so their
// product cannot overflow; any larger value is refused by the engine or
// exceeds every limit anyway.
const maxCount = 1 << 24

// Shape builds the metering shape from a body's raw top-level members: only
// these few bytes are decoded, never the prompt. Values are read the way
// the Python engines' lax validation reads them (1 and "true" are true,
// 100.0 and "100" are 100), so the gateway never believes a request smaller
// than the engine does.
func Shape(f BodyFields) RequestShape {
	s := RequestShape{Stream: laxBool(f.Stream), Choices: 1}
	if o := bytes.TrimSpace(f.StreamOptions); len(o) > 0 && string(o) != "null" {
		s.StreamOptions = true
		for it := jsonscan.ObjectMembers(o, 0, jsonscan.Loose); it.Next(); {
			if m := it.Member(); m.KeyIs(o, fieldIncludeUsage) { // the last one counts
				s.IncludeUsage = laxBool(m.Value.Of(o))
			}
		}
	}
	for _, v := range [...][]byte{f.MaxTokens, f.MaxCompletionTokens, f.MaxOutputTokens} {
		s.MaxTokens = max(s.MaxTokens, laxCount(v))
	}
	for _, v := range [...][]byte{f.N, f.BestOf} {
		s.Choices = max(s.Choices, laxCount(v))
	}
	return s
}

// laxBool is a JSON value read as a boolean the way pydantic's lax mode
// does: true, 1, and the strings "1", "t", "true", "y", "yes", "on" in any
// case.
func laxBool(v []byte) bool {
	v = bytes.TrimSpace(v)
	switch {
	case string(v) == "true" || string(v) == "1":
		return true
	case len(v) >= 2 && v[0] == '"':
		s, err := jsonscan.String(v[1 : len(v)-1])
		if err != nil {
			return false
		}
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "1", "t", "true", "y", "yes", "on":
			return true
		}
	}
	return false
}

// laxCount is a JSON value read as a positive count (0 when it is not
// one): an integer, a float with no fraction, or either in a string,
// capped at maxCount.
func laxCount(v []byte) int {
	v = bytes.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' {
		s, err := jsonscan.String(v[1 : len(v)-1])
		if err != nil {
			return 0
		}
		v = []byte(strings.TrimSpace(s))
	}
	if len(v) == 0 {
		return 0
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f <= 0 || f != math.Trunc(f) {
		return 0
	}
	return int(math.Min(f, maxCount))
}

// AskForUsage returns body with stream_options.include_usage set to true
// for a streaming request whose client did not ask for usage itself (else
// body unchanged, ok false). Without stream_options the member is inserted
// first and the rest of the body kept byte for byte; with one (include_usage
// false, absent, or stream_options null) every stream_options member is
// dropped and one is appended last, carrying the client's other options, so
// a repeated or escaped name cannot override it. A stream_options that is
// neither an object nor null is left for the engine to refuse.
func AskForUsage(body []byte, s RequestShape) ([]byte, bool) {
	if !s.Stream || s.IncludeUsage {
		return body, false
	}
	start := jsonscan.SkipSpace(body, 0)
	var (
		found bool
		last  []byte
	)
	it := jsonscan.ObjectMembers(body, start, jsonscan.Loose)
	for it.Next() {
		if m := it.Member(); m.KeyIs(body, fieldStreamOptions) {
			found, last = true, m.Value.Of(body)
		}
	}
	if it.Err() != nil {
		return body, false
	}
	if !found {
		const member = `"stream_options":{"include_usage":true},`
		i := bytes.IndexByte(body, '{')
		out := make([]byte, 0, len(body)+len(member))
		out = append(out, body[:i+1]...)
		out = append(out, member...) // the body has a stream member: never empty
		return append(out, body[i+1:]...), true
	}
	last = bytes.TrimSpace(last)
	if string(last) != "null" && (len(last) == 0 || last[0] != '{') {
		return body, false
	}
	out := make([]byte, 0, len(body)+len(`,"stream_options":{"include_usage":true}`))
	out = append(out, '{')
	n := 0
	for it := jsonscan.ObjectMembers(body, start, jsonscan.Loose); it.Next(); {
		m := it.Member()
		if m.KeyIs(body, fieldStreamOptions) {
			continue
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, body[m.Key.Start-1:m.Value.End]...) // from the opening quote
		n++
	}
	if n > 0 {
		out = append(out, ',')
	}
	out = append(out, `"stream_options":{`...)
	if last[0] == '{' {
		for it := jsonscan.ObjectMembers(last, 0, jsonscan.Loose); it.Next(); {
			m := it.Member()
			if m.KeyIs(last, fieldIncludeUsage) {
				continue
			}
			out = append(out, last[m.Key.Start-1:m.Value.End]...)
			out = append(out, ',')
		}
	}
	out = append(out, `"include_usage":true}}`...)
	return out, true
}
