package ladder

import (
	"bytes"
	"strings"

	"github.com/infergate/infergate/radix"
)

// DefaultPromptKeyMaxBytes caps a prompt key (daemon option
// PrefixKeyMaxBytes): the index looks at no more than this, so a 1 MiB
// prompt costs no more to key than a 256 KiB one.
const DefaultPromptKeyMaxBytes = radix.DefaultMaxKeyBytes

// chatPathSuffix marks the chat API, whose prompt is body "messages".
const chatPathSuffix = "/chat/completions"

// PromptKey fills Facts.PromptKey: the canonical key of the body's prompt
// (/v1/completions "prompt") or conversation (/v1/chat/completions
// "messages"), appended to buf[:0] and capped at DefaultPromptKeyMaxBytes.
// It returns nil when the body has nothing to key on or is malformed: Tier 1
// then falls through with no_key and the engine judges the body.
func PromptKey(path string, body []byte, buf []byte) []byte {
	return AppendPromptKey(buf[:0], path, body, DefaultPromptKeyMaxBytes)
}

// AppendPromptKey is PromptKey with an explicit cap (limit ≤ 0: none),
// appending to dst. The body is scanned once at its top level; only the
// prompt field is decoded.
func AppendPromptKey(dst []byte, path string, body []byte, limit int) []byte {
	prompt, messages := topLevelPrompt(body)
	chat := strings.HasSuffix(path, chatPathSuffix)
	var (
		key []byte
		err error
	)
	switch {
	case chat && messages != nil:
		key, err = radix.AppendChatKey(dst, messages, limit)
	case !chat && prompt != nil:
		key, err = radix.AppendCompletionKey(dst, prompt, limit)
	case path == "" && messages != nil: // unknown route: take what is there
		key, err = radix.AppendChatKey(dst, messages, limit)
	case path == "" && prompt != nil:
		key, err = radix.AppendCompletionKey(dst, prompt, limit)
	default:
		return nil
	}
	if err != nil || len(key) == len(dst) {
		return nil
	}
	return key
}

// topLevelPrompt returns the raw JSON values of the top-level "prompt" and
// "messages" fields of an object body (nil when absent or the body is not
// an object). Values are sub-slices of body: nothing is copied or decoded.
func topLevelPrompt(body []byte) (prompt, messages []byte) {
	s := fieldScanner{b: body}
	s.ws()
	if !s.eat('{') {
		return nil, nil
	}
	for first := true; ; first = false {
		s.ws()
		if s.eat('}') {
			return prompt, messages
		}
		if !first {
			if !s.eat(',') {
				return nil, nil
			}
			s.ws()
		}
		ks, ke, ok := s.str()
		if !ok {
			return nil, nil
		}
		s.ws()
		if !s.eat(':') {
			return nil, nil
		}
		s.ws()
		vs := s.i
		if !s.skipValue() {
			return nil, nil
		}
		// Field names with escapes are not matched: no client escapes
		// "prompt", and encoding/json matches case-insensitively anyway,
		// which engines do not.
		switch string(body[ks:ke]) {
		case radix.FieldPrompt:
			prompt = body[vs:s.i]
		case radix.FieldMessages:
			messages = body[vs:s.i]
		}
	}
}

// fieldScanner walks JSON structure without decoding it.
type fieldScanner struct {
	b []byte
	i int
}

func (s *fieldScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *fieldScanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str consumes a string and returns the bounds of its raw contents. It
// jumps quote to quote (bytes.IndexByte) and treats a quote as closing when
// an even number of backslashes precedes it.
func (s *fieldScanner) str() (start, end int, ok bool) {
	if !s.eat('"') {
		return 0, 0, false
	}
	start = s.i
	for {
		j := bytes.IndexByte(s.b[s.i:], '"')
		if j < 0 {
			s.i = len(s.b)
			return 0, 0, false
		}
		q := s.i + j
		bs := 0
		for k := q - 1; k >= start && s.b[k] == '\\'; k-- {
			bs++
		}
		s.i = q + 1
		if bs%2 == 0 {
			return start, q, true
		}
	}
}

// skipValue consumes one value: strings honour escapes, containers are
// matched by depth (the builders validate the prompt value itself).
func (s *fieldScanner) skipValue() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, _, ok := s.str()
		return ok
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, _, ok := s.str(); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default: // number, true, false, null
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.i > start
			}
			s.i++
		}
		return s.i > start
	}
}
