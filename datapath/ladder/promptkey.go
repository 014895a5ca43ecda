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
	return ScanBody(body).AppendPromptKey(dst, path, limit)
}

// Wire names of the other top-level members routing reads (radix names the
// prompt ones).
const (
	fieldModel = "model"
	fieldUser  = "user"

	fieldStream              = "stream"
	fieldStreamOptions       = "stream_options"
	fieldMaxTokens           = "max_tokens"
	fieldMaxCompletionTokens = "max_completion_tokens"
	fieldMaxOutputTokens     = "max_output_tokens"
)

// BodyFields are the raw JSON values of the top-level members routing reads
// from a request body (nil when absent or the body is not an object). They
// are sub-slices of the body: nothing is copied or decoded, so one ScanBody
// serves the model, the session key and the prompt key of a request.
type BodyFields struct {
	Prompt, Messages, Model, User []byte
	// Stream, StreamOptions and MaxTokens (the first of max_completion_tokens,
	// max_tokens and max_output_tokens) serve tenant metering.
	Stream, StreamOptions, MaxTokens []byte
}

// AppendPromptKey is the package AppendPromptKey over an already scanned
// body.
func (b BodyFields) AppendPromptKey(dst []byte, path string, limit int) []byte {
	chat := strings.HasSuffix(path, chatPathSuffix)
	var (
		key []byte
		err error
	)
	switch {
	case chat && b.Messages != nil:
		key, err = radix.AppendChatKey(dst, b.Messages, limit)
	case !chat && b.Prompt != nil:
		key, err = radix.AppendCompletionKey(dst, b.Prompt, limit)
	case path == "" && b.Messages != nil: // unknown route: take what is there
		key, err = radix.AppendChatKey(dst, b.Messages, limit)
	case path == "" && b.Prompt != nil:
		key, err = radix.AppendCompletionKey(dst, b.Prompt, limit)
	default:
		return nil
	}
	if err != nil || len(key) == len(dst) {
		return nil
	}
	return key
}

// ScanBody walks an object body's top level once and returns the members
// routing reads (all nil when the body is not a well-formed object).
func ScanBody(body []byte) BodyFields {
	var f BodyFields
	s := fieldScanner{b: body}
	s.ws()
	if !s.eat('{') {
		return BodyFields{}
	}
	for first := true; ; first = false {
		s.ws()
		if s.eat('}') {
			return f
		}
		if !first {
			if !s.eat(',') {
				return BodyFields{}
			}
			s.ws()
		}
		ks, ke, ok := s.str()
		if !ok {
			return BodyFields{}
		}
		s.ws()
		if !s.eat(':') {
			return BodyFields{}
		}
		s.ws()
		vs := s.i
		if !s.skipValue() {
			return BodyFields{}
		}
		// Field names with escapes are not matched: no client escapes
		// "prompt", and encoding/json matches case-insensitively anyway,
		// which engines do not.
		switch v := body[vs:s.i]; string(body[ks:ke]) {
		case radix.FieldPrompt:
			f.Prompt = v
		case radix.FieldMessages:
			f.Messages = v
		case fieldModel:
			f.Model = v
		case fieldUser:
			f.User = v
		case fieldStream:
			f.Stream = v
		case fieldStreamOptions:
			f.StreamOptions = v
		case fieldMaxCompletionTokens, fieldMaxTokens, fieldMaxOutputTokens:
			if f.MaxTokens == nil {
				f.MaxTokens = v
			}
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
