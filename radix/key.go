package radix

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"

	"github.com/infergate/infergate/jsonscan"
)

// Wire field names and values the key builders read from OpenAI-style
// request bodies.
const (
	FieldPrompt   = "prompt"   // /v1/completions
	FieldMessages = "messages" // /v1/chat/completions
	FieldRole     = "role"
	FieldContent  = "content"
	FieldType     = "type"
	FieldText     = "text"
	PartTypeText  = "text"
)

// Bytes of the canonical key encoding. Decoded JSON text is copied verbatim
// except that the bytes escByte..msgStart are escaped (escByte, b|0x40), so
// the markers below never occur in text and the encoding is injective.
const (
	tokenTag  byte = 0xFF // first byte of a token-id key; never starts UTF-8 text
	partOther byte = 0x1A // a non-text content part: type, roleEnd, raw JSON
	escByte   byte = 0x1C
	partSep   byte = 0x1D // between content parts of one message
	msgStart  byte = 0x1E // starts every message
	roleEnd   byte = 0x1F // ends the role of a message or the type of a part
)

// ErrNoKey means the request carries nothing to key on (absent, null or
// empty prompt or messages); the prefix tier falls through.
var ErrNoKey = errors.New("radix: no prompt key")

// ErrMalformed means the value is not the JSON shape the builder expects.
var ErrMalformed = errors.New("radix: malformed prompt")

// CompletionKey is AppendCompletionKey without a length limit.
func CompletionKey(prompt json.RawMessage) ([]byte, error) {
	return AppendCompletionKey(nil, prompt, 0)
}

// ChatKey is AppendChatKey without a length limit.
func ChatKey(messages json.RawMessage) ([]byte, error) {
	return AppendChatKey(nil, messages, 0)
}

// AppendCompletionKey appends the canonical key of a /v1/completions
// `prompt` to dst. A string prompt keys as its decoded text; a token-id
// array as tokenTag followed by each id as 4-byte little-endian; a batch
// (array of strings or of token arrays) keys as its first element, since
// the batch is routed as one request. limit > 0 stops the key (and the
// parsing) after limit bytes, which is all an Index looks at anyway.
func AppendCompletionKey(dst []byte, prompt json.RawMessage, limit int) ([]byte, error) {
	s := scanner{b: prompt, limit: limit, base: len(dst)}
	s.ws()
	switch s.peek() {
	case '"':
		return s.appendKey(dst, func(out []byte) ([]byte, error) { return s.text(out) })
	case '[':
		s.i++
		s.ws()
		switch c := s.peek(); {
		case c == ']':
			return dst, ErrNoKey
		case c == '"':
			return s.appendKey(dst, func(out []byte) ([]byte, error) { return s.text(out) })
		case c == '[':
			s.i++
			return s.appendKey(dst, s.tokens)
		case c == '-' || (c >= '0' && c <= '9'):
			return s.appendKey(dst, s.tokens)
		}
	case 'n':
		if bytes.HasPrefix(prompt[s.i:], []byte("null")) {
			return dst, ErrNoKey
		}
	case 0:
		return dst, ErrNoKey
	}
	return dst, s.fail("prompt is neither a string nor a token array")
}

// AppendChatKey appends the canonical key of a /v1/chat/completions
// `messages` array to dst: for each message in order, msgStart, the role,
// roleEnd, then the content. String content is its text; array content is
// its parts separated by partSep, a text part as its text and any other part
// as partOther, its type, roleEnd and its raw JSON. A string content and a
// single text part therefore key alike, and two conversations that share a
// system prompt and history share a key prefix up to where they diverge.
// Other message fields (name, tool_calls, ...) are ignored. limit > 0 stops
// the key after limit bytes.
func AppendChatKey(dst []byte, messages json.RawMessage, limit int) ([]byte, error) {
	s := scanner{b: messages, limit: limit, base: len(dst)}
	s.ws()
	switch s.peek() {
	case '[':
	case 0:
		return dst, ErrNoKey
	case 'n':
		if bytes.HasPrefix(messages[s.i:], []byte("null")) {
			return dst, ErrNoKey
		}
		return dst, s.fail("messages is not an array")
	default:
		return dst, s.fail("messages is not an array")
	}
	s.i++
	out := dst
	for n := 0; ; n++ {
		done, err := s.next(n, ']')
		if err != nil {
			return dst, err
		}
		if done {
			if n == 0 {
				return dst, ErrNoKey
			}
			return out, nil
		}
		if out, err = s.message(out); err != nil {
			return dst, fmt.Errorf("messages[%d]: %w", n, err)
		}
		if s.full(out) {
			return out[:s.base+s.limit], nil
		}
	}
}

// scanner is a minimal JSON reader: it finds the few fields a key needs and
// skips everything else without building values.
type scanner struct {
	b     []byte
	i     int
	limit int // 0: unlimited
	base  int // len(dst) before this key, so limit counts only our bytes
}

func (s *scanner) full(out []byte) bool { return s.limit > 0 && len(out)-s.base >= s.limit }

// appendKey runs one element builder and applies the limit.
func (s *scanner) appendKey(dst []byte, build func([]byte) ([]byte, error)) ([]byte, error) {
	out, err := build(dst)
	if err != nil {
		return dst, err
	}
	if len(out) == len(dst) {
		return dst, ErrNoKey
	}
	if s.full(out) {
		out = out[:s.base+s.limit]
	}
	return out, nil
}

func (s *scanner) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrMalformed, what, s.i)
}

func (s *scanner) ws() { s.i = jsonscan.SkipSpace(s.b, s.i) }

func (s *scanner) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return s.fail(fmt.Sprintf("expected %q", c))
	}
	s.i++
	return nil
}

// str scans the string at s.i and returns its raw body b[start:end]
// (jsonscan.SkipString: one vector scan, escapes not decoded).
func (s *scanner) str() (start, end int, err error) {
	if s.peek() != '"' {
		return 0, 0, s.fail(`expected '"'`)
	}
	start = s.i + 1
	next, ok := jsonscan.SkipString(s.b, s.i)
	if !ok {
		return 0, 0, s.fail("unterminated string")
	}
	s.i = next
	return start, next - 1, nil
}

// escaped reports whether a string body needs decoding.
func escaped(raw []byte) bool { return bytes.IndexByte(raw, '\\') >= 0 }

// text scans a string and appends its decoded, marker-escaped bytes, no
// more than the limit needs: decoding never shrinks text by more than 6:1,
// so 6·(room+2) raw bytes decode past the limit even if the cut splits a
// surrogate pair.
//
// Of a string longer than that window only the window is searched for a
// backslash: when it has none, the first room bytes are the key's either
// way, so the plain copy serves.
func (s *scanner) text(out []byte) ([]byte, error) {
	start, end, err := s.str()
	if err != nil {
		return out, err
	}
	raw := s.b[start:end]
	if s.limit <= 0 {
		return appendText(out, raw, escaped(raw))
	}
	room := max(s.base+s.limit-len(out), 0)
	if cut := 6 * (room + 2); len(raw) > cut {
		if escaped(raw[:cut]) {
			return appendText(out, trimEscape(raw[:cut]), true)
		}
		return appendText(out, raw[:room], false)
	}
	if escaped(raw) {
		return appendText(out, raw, true)
	}
	return appendText(out, raw[:min(len(raw), room)], false)
}

// trimEscape drops a trailing incomplete escape sequence so a cut string
// still decodes.
func trimEscape(raw []byte) []byte {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		n := 2
		if i+1 < len(raw) && raw[i+1] == 'u' {
			n = 6
		}
		if i+n > len(raw) {
			return raw[:i]
		}
		i += n - 1
	}
	return raw
}

// tokens appends a token-id array; s.i is just past its '['.
func (s *scanner) tokens(out []byte) ([]byte, error) {
	out = append(out, tokenTag)
	for n := 0; ; n++ {
		done, err := s.next(n, ']')
		if err != nil {
			return out, err
		}
		if done {
			if n == 0 {
				return out[:len(out)-1], nil
			}
			return out, nil
		}
		var v uint64
		digits := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			v = v*10 + uint64(s.b[s.i]-'0')
			if v > 1<<32-1 {
				return out, s.fail("token id out of range")
			}
			s.i++
			digits++
		}
		if digits == 0 {
			return out, s.fail("token id is not a non-negative integer")
		}
		out = binary.LittleEndian.AppendUint32(out, uint32(v))
		if s.full(out) {
			return out, nil
		}
	}
}

// message appends one message object. When role precedes content (as
// clients send it) the content is emitted as it is scanned; otherwise it is
// scanned again once the role is known.
func (s *scanner) message(out []byte) ([]byte, error) {
	if err := s.expect('{'); err != nil {
		return out, err
	}
	entry := len(out)
	var role [2]int
	roleEsc, emitted := false, false
	role[0] = -1
	contentAt := -1
	for n := 0; ; n++ {
		var name [16]byte
		field, done, err := s.member(n, name[:0])
		if err != nil {
			return out, err
		}
		if done {
			break
		}
		switch string(field) {
		case FieldRole:
			if s.peek() != '"' {
				return out, s.fail("role is not a string")
			}
			st, en, err := s.str()
			if err != nil {
				return out, err
			}
			role, roleEsc = [2]int{st, en}, escaped(s.b[st:en])
			if emitted { // a role after the content: redo at the end
				out, emitted = out[:entry], false
			}
			continue
		case FieldContent:
			contentAt = s.i
			if role[0] >= 0 {
				if out, err = s.header(out[:entry], role, roleEsc); err != nil {
					return out, err
				}
				if out, err = s.content(out); err != nil || s.full(out) {
					return out, err
				}
				emitted = true
				continue
			}
		}
		if err := s.skip(); err != nil {
			return out, err
		}
	}
	if emitted {
		return out, nil
	}
	out, err := s.header(out[:entry], role, roleEsc)
	if err != nil || contentAt < 0 {
		return out, err
	}
	c := scanner{b: s.b, i: contentAt, limit: s.limit, base: s.base}
	return c.content(out)
}

// header appends msgStart, the role (if any) and roleEnd.
func (s *scanner) header(out []byte, role [2]int, escaped bool) ([]byte, error) {
	out = append(out, msgStart)
	if role[0] >= 0 {
		var err error
		if out, err = appendText(out, s.b[role[0]:role[1]], escaped); err != nil {
			return out, err
		}
	}
	return append(out, roleEnd), nil
}

// content appends a message's content (string, null or array of parts) and
// moves past it, unless the limit stops it first.
func (s *scanner) content(out []byte) ([]byte, error) {
	switch s.peek() {
	case '"':
		return s.text(out)
	case 'n':
		return out, s.skip()
	case '[':
	default:
		return out, s.fail("content is neither a string nor an array")
	}
	s.i++
	for n := 0; ; n++ {
		done, err := s.next(n, ']')
		if done || err != nil {
			return out, err
		}
		if n > 0 {
			out = append(out, partSep)
		}
		if out, err = s.part(out); err != nil {
			return out, fmt.Errorf("content[%d]: %w", n, err)
		}
		if s.full(out) {
			return out, nil
		}
	}
}

// part appends one content part.
func (s *scanner) part(out []byte) ([]byte, error) {
	partStart := s.i
	if err := s.expect('{'); err != nil {
		return out, err
	}
	var typ, txt [2]int
	typEsc, txtEsc := false, false
	typ[0], txt[0] = -1, -1
	for n := 0; ; n++ {
		var name [16]byte
		field, done, err := s.member(n, name[:0])
		if err != nil {
			return out, err
		}
		if done {
			break
		}
		if (string(field) == FieldType || string(field) == FieldText) && s.peek() == '"' {
			st, en, err := s.str()
			if err != nil {
				return out, err
			}
			if string(field) == FieldType {
				typ, typEsc = [2]int{st, en}, escaped(s.b[st:en])
			} else {
				txt, txtEsc = [2]int{st, en}, escaped(s.b[st:en])
			}
			continue
		}
		if err := s.skip(); err != nil {
			return out, err
		}
	}
	isText := typ[0] >= 0 && !typEsc && string(s.b[typ[0]:typ[1]]) == PartTypeText
	if isText {
		if txt[0] < 0 {
			return out, nil
		}
		return appendText(out, s.b[txt[0]:txt[1]], txtEsc)
	}
	out = append(out, partOther)
	if typ[0] >= 0 {
		var err error
		if out, err = appendText(out, s.b[typ[0]:typ[1]], typEsc); err != nil {
			return out, err
		}
	}
	out = append(out, roleEnd)
	return appendEscaped(out, s.b[partStart:s.i]), nil
}

// next moves to element n of the array or object whose opening bracket has
// been consumed (jsonscan.Step): every container loop of the key scanner
// steps with it, so separators are handled in one place.
func (s *scanner) next(n int, closing byte) (done bool, err error) {
	i, done, ok := jsonscan.Step(s.b, s.i, n, closing)
	s.i = i
	if !ok && n > 0 { // at the first element the element's builder says what is wrong
		return false, s.fail("expected ',' and a value")
	}
	return done, nil
}

// member moves to member n of the object whose '{' has been consumed and
// reads its name and colon; done at the closing brace.
func (s *scanner) member(n int, buf []byte) (field []byte, done bool, err error) {
	if done, err = s.next(n, '}'); done || err != nil {
		return nil, done, err
	}
	field, err = s.fieldName(buf)
	return field, false, err
}

// fieldName reads an object member name and its colon, decoding escapes
// into buf only when there are any.
func (s *scanner) fieldName(buf []byte) ([]byte, error) {
	start, end, err := s.str()
	if err != nil {
		return nil, err
	}
	name := s.b[start:end]
	if escaped(name) {
		if name, err = appendText(buf, name, true); err != nil {
			return nil, err
		}
	}
	s.ws()
	if err := s.expect(':'); err != nil {
		return nil, err
	}
	s.ws()
	return name, nil
}

// skip moves past one JSON value without decoding it (jsonscan.SkipValue).
func (s *scanner) skip() error {
	end, ok := jsonscan.SkipValue(s.b, s.i)
	if !ok {
		return s.fail("malformed value")
	}
	s.i = end
	return nil
}

// appendText appends the JSON string body raw, decoded when it has escapes,
// with marker bytes escaped.
func appendText(out, raw []byte, escaped bool) ([]byte, error) {
	if !escaped {
		return appendEscaped(out, raw), nil
	}
	n := len(out)
	out, err := jsonscan.AppendUnescaped(out, raw)
	if err != nil {
		return out, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return escapeMarkersFrom(out, n), nil
}

// escapeMarkersFrom escapes the marker bytes of out[from:] in place (decoded
// text, where an escape such as \u001e can produce one; rare).
func escapeMarkersFrom(out []byte, from int) []byte {
	j := indexMarker(out[from:])
	if j < 0 {
		return out
	}
	extra := 0
	for _, c := range out[from+j:] {
		if c >= partOther && c <= roleEnd {
			extra++
		}
	}
	n := len(out)
	out = append(out, make([]byte, extra)...)
	for r, w := n-1, len(out)-1; extra > 0; r-- {
		c := out[r]
		if c >= partOther && c <= roleEnd {
			out[w], out[w-1] = c|0x40, escByte
			w -= 2
			extra--
		} else {
			out[w] = c
			w--
		}
	}
	return out
}

// appendEscaped appends text escaping the marker bytes.
func appendEscaped(out, text []byte) []byte {
	for len(text) > 0 {
		j := indexMarker(text)
		if j < 0 {
			return append(out, text...)
		}
		out = append(out, text[:j]...)
		out = append(out, escByte, text[j]|0x40)
		text = text[j+1:]
	}
	return out
}

// indexMarker finds the first byte in [partOther, roleEnd]. An agent's
// prompt runs to hundreds of KiB with no marker in it, so the scan tests
// 32 bytes per branch (four words, each byte checked for the range at once)
// and finds the byte in the word that flagged it by its trailing zeros;
// only a tail shorter than a word goes byte by byte.
func indexMarker(b []byte) int {
	i := 0
	for ; len(b)-i >= 32; i += 32 {
		w := b[i : i+32]
		if markers(binary.LittleEndian.Uint64(w))|markers(binary.LittleEndian.Uint64(w[8:]))|
			markers(binary.LittleEndian.Uint64(w[16:]))|markers(binary.LittleEndian.Uint64(w[24:])) != 0 {
			break
		}
	}
	for ; len(b)-i >= 8; i += 8 {
		if m := markers(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c >= partOther && c <= roleEnd {
			return i
		}
	}
	return -1
}

// markers sets bit 8k+7 of its result exactly when byte k of the
// little-endian word x is a marker byte. Each byte is masked to 7 bits
// first, so no subtraction borrows and no addition carries into its
// neighbour: a masked byte y is in the range when (127+roleEnd+1) − y and
// y + 127 − (partOther−1) both have their top bit set, and ^x drops the
// bytes that had the top bit set before masking.
func markers(x uint64) uint64 {
	const (
		ones  uint64 = 0x0101010101010101
		below        = (127 + uint64(roleEnd) + 1) * ones
		above        = (127 - (uint64(partOther) - 1)) * ones
	)
	y := x & (0x7f * ones)
	return (below - y) & (y + above) &^ x & (0x80 * ones)
}
