package bpe

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unsafe"
)

// ErrUnsupportedChat marks a chat request (or template) the built-in
// renderers do not reproduce exactly; callers ask the engine instead.
var ErrUnsupportedChat = errors.New("bpe: chat request or template not supported by the built-in renderers")

// Message is one chat message with plain text content.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Chat roles the renderers accept (tool turns are refused).
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Template is a recognised chat template. HF templates are Jinja programs;
// rather than interpret arbitrary Jinja (and differ on Python-isms), the
// templates below are reimplemented and pinned by the SHA-256 of their
// exact chat_template text, with ids checked against transformers-style
// rendering (@huggingface/jinja) plus HF tokenizers in the parity tests.
// Any other template is unsupported, so the tier falls back to /tokenize.
type Template struct {
	Name   string
	render func(dst []byte, msgs []Message, addGenerationPrompt bool, bos string) []byte
	bos    string
}

// Supported templates by the SHA-256 of tokenizer_config.json's
// chat_template.
var templates = map[string]Template{
	// Qwen3 (0.6B … 235B share it): ChatML with <think> handling.
	"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5": {Name: "qwen3", render: renderQwen3},
	// Llama 3 (Meta-Llama-3-8B-Instruct's original template).
	"b48c47f6443892716176eb200bf4ef108f64e06ca26ed0fa8ebc0a4b3992fcb2": {Name: "llama3", render: renderLlama3},
}

// SupportedTemplates lists the built-in template names.
func SupportedTemplates() []string {
	out := make([]string, 0, len(templates))
	for _, t := range templates {
		out = append(out, t.Name)
	}
	return out
}

// LoadTemplate reads tokenizer_config.json and returns its chat template
// when it is one of the supported ones (ErrUnsupportedChat otherwise).
func LoadTemplate(path string) (Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Template{}, fmt.Errorf("bpe: %w", err)
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return Template{}, fmt.Errorf("bpe: %s: %w", path, err)
	}
	var text string
	if err := json.Unmarshal(cfg.ChatTemplate, &text); err != nil {
		return Template{}, fmt.Errorf("%w: %s has no single chat_template string", ErrUnsupportedChat, path)
	}
	sum := sha256.Sum256([]byte(text))
	t, ok := templates[hex.EncodeToString(sum[:])]
	if !ok {
		return Template{}, fmt.Errorf("%w: chat_template of %s (sha256 %x) is not one of %v", ErrUnsupportedChat, path, sum, SupportedTemplates())
	}
	t.bos = tokenText(cfg.BOS)
	return t, nil
}

// tokenText reads a tokenizer_config token: a string or {"content": …}.
func tokenText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Content
}

// Render renders msgs as the engine's template would.
func (t Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	b, err := t.AppendRender(nil, msgs, addGenerationPrompt)
	return string(b), err
}

// AppendRender appends the rendering of msgs to dst (grown once, to fit).
func (t Template) AppendRender(dst []byte, msgs []Message, addGenerationPrompt bool) ([]byte, error) {
	if t.render == nil {
		return dst, ErrUnsupportedChat
	}
	if len(msgs) == 0 {
		return dst, fmt.Errorf("%w: no messages", ErrUnsupportedChat)
	}
	n := 64 // the markup of each turn, and the generation prompt
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant:
		default:
			return dst, fmt.Errorf("%w: messages[%d] role %q", ErrUnsupportedChat, i, m.Role)
		}
		n += len(m.Content) + 64
	}
	return t.render(slices.Grow(dst, n), msgs, addGenerationPrompt, t.bos), nil
}

// EncodeChat returns the ids of msgs rendered by tmpl, as Encode of
// Render's text without special tokens (what vLLM does for a chat). The
// rendering goes to a reused buffer, not a string per request: Encode keeps
// no reference to its text (its caches hold copies).
func (t *Tokenizer) EncodeChat(tmpl Template, msgs []Message, addGenerationPrompt bool) ([]uint32, error) {
	bp, _ := renderBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	text, err := tmpl.AppendRender((*bp)[:0], msgs, addGenerationPrompt)
	if err != nil {
		renderBufs.Put(bp)
		return nil, err
	}
	ids := t.Encode(unsafe.String(unsafe.SliceData(text), len(text)), false)
	if cap(text) <= renderBufMax {
		*bp = text
		renderBufs.Put(bp)
	}
	return ids, nil
}

// renderBufs holds rendering buffers between requests; one larger than
// renderBufMax (a long-context prompt) is left to the collector rather
// than kept.
var renderBufs sync.Pool

const renderBufMax = 256 << 10

const (
	imStart = "<|im_start|>"
	imEnd   = "<|im_end|>"
)

// renderQwen3 is Qwen3's template without tools: a leading system turn,
// ChatML turns, and assistant turns stripped of <think> reasoning unless
// they follow the last user query (then the reasoning is re-emitted in
// <think> tags).
func renderQwen3(b []byte, msgs []Message, addGen bool, _ string) []byte {
	if msgs[0].Role == RoleSystem {
		b = write(b, imStart, "system\n", msgs[0].Content, imEnd, "\n")
	}
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role == RoleUser && !(strings.HasPrefix(m.Content, "<tool_response>") && strings.HasSuffix(m.Content, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	for i, m := range msgs {
		switch {
		case m.Role == RoleUser || (m.Role == RoleSystem && i > 0):
			b = write(b, imStart, m.Role, "\n", m.Content, imEnd, "\n")
		case m.Role == RoleAssistant:
			content, reasoning := m.Content, ""
			if strings.Contains(content, "</think>") {
				parts := strings.Split(content, "</think>")
				content = strings.TrimLeft(parts[len(parts)-1], "\n")
				head := strings.TrimRight(parts[0], "\n")
				hp := strings.Split(head, "<think>")
				reasoning = strings.TrimLeft(hp[len(hp)-1], "\n")
			}
			if i > lastQuery && (i == len(msgs)-1 || reasoning != "") {
				b = write(b, imStart, "assistant\n<think>\n", strings.Trim(reasoning, "\n"), "\n</think>\n\n", strings.TrimLeft(content, "\n"))
			} else {
				b = write(b, imStart, "assistant\n", content)
			}
			b = write(b, imEnd, "\n")
		}
	}
	if addGen {
		b = write(b, imStart, "assistant\n")
	}
	return b
}

// renderLlama3 is Meta-Llama-3-Instruct's original template: BOS, header
// turns with trimmed content, and always the assistant header (the
// template ignores add_generation_prompt).
func renderLlama3(b []byte, msgs []Message, _ bool, bos string) []byte {
	for i, m := range msgs {
		if i == 0 {
			b = append(b, bos...)
		}
		b = write(b, "<|start_header_id|>", m.Role, "<|end_header_id|>\n\n", pyStrip(m.Content), "<|eot_id|>")
	}
	return append(b, "<|start_header_id|>assistant<|end_header_id|>\n\n"...)
}

// write appends parts to b one after another: concatenating them first
// would copy each message's content once more.
func write(b []byte, parts ...string) []byte {
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// pyStrip is Jinja's trim filter (Python str.strip()): Python's whitespace
// is Unicode White_Space plus the ASCII separators U+001C…U+001F.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) })
}
