package radix

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
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

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

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

// str scans the string at s.i and returns its raw body b[start:end]. It
// stays linear however many escapes a string holds: the closing-quote
// candidate is searched for again only once an escape skips past it.
func (s *scanner) str() (start, end int, escaped bool, err error) {
	if err := s.expect('"'); err != nil {
		return 0, 0, false, err
	}
	start = s.i
	quote := -1
	for {
		if quote < s.i {
			j := bytes.IndexByte(s.b[s.i:], '"')
			if j < 0 {
				return 0, 0, false, s.fail("unterminated string")
			}
			quote = s.i + j
		}
		k := bytes.IndexByte(s.b[s.i:quote], '\\')
		if k < 0 {
			s.i = quote + 1
			return start, quote, escaped, nil
		}
		escaped = true
		s.i += k + 2 // the escaped byte is never a terminator
		if s.i > len(s.b) {
			return 0, 0, false, s.fail("unterminated string")
		}
	}
}

// text scans a string and appends its decoded, marker-escaped bytes, no
// more than the limit needs: decoding never shrinks text by more than 6:1,
// so 6·(room+2) raw bytes decode past the limit even if the cut splits a
// surrogate pair.
func (s *scanner) text(out []byte) ([]byte, error) {
	start, end, escaped, err := s.str()
	if err != nil {
		return out, err
	}
	raw := s.b[start:end]
	if s.limit > 0 {
		room := max(s.base+s.limit-len(out), 0)
		if !escaped {
			raw = raw[:min(len(raw), room)]
		} else if cut := 6 * (room + 2); len(raw) > cut {
			raw = trimEscape(raw[:cut])
		}
	}
	return appendText(out, raw, escaped)
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
		done, err := s.next(n, '}')
		if err != nil {
			return out, err
		}
		if done {
			break
		}
		var name [16]byte
		field, err := s.fieldName(name[:0])
		if err != nil {
			return out, err
		}
		switch string(field) {
		case FieldRole:
			if s.peek() != '"' {
				return out, s.fail("role is not a string")
			}
			st, en, esc, err := s.str()
			if err != nil {
				return out, err
			}
			role, roleEsc = [2]int{st, en}, esc
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
		done, err := s.next(n, '}')
		if err != nil {
			return out, err
		}
		if done {
			break
		}
		var name [16]byte
		field, err := s.fieldName(name[:0])
		if err != nil {
			return out, err
		}
		if (string(field) == FieldType || string(field) == FieldText) && s.peek() == '"' {
			st, en, esc, err := s.str()
			if err != nil {
				return out, err
			}
			if string(field) == FieldType {
				typ, typEsc = [2]int{st, en}, esc
			} else {
				txt, txtEsc = [2]int{st, en}, esc
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
// been consumed: past the separating comma when n > 0, or past closing (and
// done) when the container ends there. Every container loop of the key
// scanner steps with it, so separators are handled in one place.
func (s *scanner) next(n int, closing byte) (done bool, err error) {
	s.ws()
	if s.peek() == closing {
		s.i++
		return true, nil
	}
	if n > 0 {
		if err := s.expect(','); err != nil {
			return false, err
		}
		s.ws()
	}
	return false, nil
}

// fieldName reads an object member name and its colon, decoding escapes
// into buf only when there are any.
func (s *scanner) fieldName(buf []byte) ([]byte, error) {
	start, end, escaped, err := s.str()
	if err != nil {
		return nil, err
	}
	name := s.b[start:end]
	if escaped {
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

// skip moves past one JSON value without decoding it.
func (s *scanner) skip() error {
	depth := 0
	for {
		s.ws()
		switch c := s.peek(); c {
		case 0:
			return s.fail("unexpected end")
		case '"':
			if _, _, _, err := s.str(); err != nil {
				return err
			}
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			if depth == 0 {
				return s.fail("unexpected close")
			}
			depth--
			s.i++
		default:
			// Scalars, commas and colons: consume up to the next structural byte.
			for s.i < len(s.b) {
				c := s.b[s.i]
				if c == '"' || c == '{' || c == '[' || c == '}' || c == ']' {
					break
				}
				if depth == 0 && c == ',' {
					return nil
				}
				s.i++
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

// appendText appends the JSON string body raw, decoded when it has escapes,
// with marker bytes escaped.
func appendText(out, raw []byte, escaped bool) ([]byte, error) {
	if !escaped {
		return appendEscaped(out, raw), nil
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			out = appendByte(out, c)
			i++
			continue
		}
		if i+1 >= len(raw) {
			return out, fmt.Errorf("%w: dangling escape", ErrMalformed)
		}
		i += 2
		switch raw[i-1] {
		case '"', '\\', '/':
			out = append(out, raw[i-1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw[i:])
			if !ok {
				return out, fmt.Errorf("%w: bad \\u escape", ErrMalformed)
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(raw[min(i+2, len(raw)):]); ok && i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						i += 6
						r = dec
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			if r < utf8.RuneSelf {
				out = appendByte(out, byte(r))
			} else {
				out = utf8.AppendRune(out, r)
			}
		default:
			return out, fmt.Errorf("%w: bad escape \\%c", ErrMalformed, raw[i-1])
		}
	}
	return out, nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
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

func appendByte(out []byte, c byte) []byte {
	if c >= partOther && c <= roleEnd {
		return append(out, escByte, c|0x40)
	}
	return append(out, c)
}

// indexMarker finds the first byte in [partOther, roleEnd]. Control bytes are
// rare in prompts, so this is a plain loop the compiler keeps tight.
func indexMarker(b []byte) int {
	for i, c := range b {
		if c >= partOther && c <= roleEnd {
			return i
		}
	}
	return -1
}
