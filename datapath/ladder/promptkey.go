package ladder

import (
	"strings"

	"github.com/infergate/infergate/jsonscan"
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
	fieldN                   = "n"
	fieldBestOf              = "best_of"
)

// BodyFields are the raw JSON values of the top-level members routing reads
// from a request body (nil when absent or the body is not an object). They
// are sub-slices of the body: nothing is copied or decoded, so one ScanBody
// serves the model, the session key and the prompt key of a request.
type BodyFields struct {
	Prompt, Messages, Model, User []byte
	// Stream, StreamOptions, the three completion ceilings, N and BestOf
	// serve tenant metering, which reserves the largest ceiling per choice.
	Stream, StreamOptions                           []byte
	MaxTokens, MaxCompletionTokens, MaxOutputTokens []byte
	N, BestOf                                       []byte
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

// ScanFacts is ScanBody of f.Body that also hands the prompt members on in
// f (Prompt, Messages, BodyScanned), so a tier that tokenises the prompt
// (KV-exact) does not walk the body again to find them. Every caller that
// builds Facts from a scanned body goes through it: the single pool's
// pick, the P/D pair's and the routing explanation.
func ScanFacts(f *Facts) BodyFields {
	b := ScanBody(f.Body)
	f.Prompt, f.Messages, f.BodyScanned = b.Prompt, b.Messages, true
	return b
}

// ScanBody walks an object body's top level once and returns the members
// routing reads (all nil when the body is not a well-formed object). The
// walk is loose (jsonscan.Loose): values are skipped by structure, the
// builders and the engine judge them.
func ScanBody(body []byte) BodyFields {
	var f BodyFields
	it := jsonscan.ObjectMembers(body, jsonscan.SkipSpace(body, 0), jsonscan.Loose)
	var kb [32]byte
	for it.Next() {
		m := it.Member()
		v := m.Value.Of(body)
		// Names are matched as the engine reads them: escapes decoded, then
		// compared exactly ("strea\u006d" is stream; "Stream" is not). A
		// repeated member overwrites the earlier one, as engines' JSON
		// decoders do.
		switch string(memberName(kb[:0], body, m)) {
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
		case fieldMaxTokens:
			f.MaxTokens = v
		case fieldMaxCompletionTokens:
			f.MaxCompletionTokens = v
		case fieldMaxOutputTokens:
			f.MaxOutputTokens = v
		case fieldN:
			f.N = v
		case fieldBestOf:
			f.BestOf = v
		}
	}
	if it.Err() != nil {
		return BodyFields{}
	}
	return f
}

// memberName is m's name with its escapes decoded (into buf when it has
// any); a name that does not decode matches nothing.
func memberName(buf, body []byte, m jsonscan.Member) []byte {
	k := m.Key.Of(body)
	if !m.Escaped {
		return k
	}
	d, err := jsonscan.AppendUnescaped(buf, k)
	if err != nil {
		return nil
	}
	return d
}
