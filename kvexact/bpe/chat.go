package bpe

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"
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
	render func(msgs []Message, addGenerationPrompt bool, bos string) (string, error)
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
	if t.render == nil {
		return "", ErrUnsupportedChat
	}
	if len(msgs) == 0 {
		return "", fmt.Errorf("%w: no messages", ErrUnsupportedChat)
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant:
		default:
			return "", fmt.Errorf("%w: messages[%d] role %q", ErrUnsupportedChat, i, m.Role)
		}
	}
	return t.render(msgs, addGenerationPrompt, t.bos)
}

const (
	imStart = "<|im_start|>"
	imEnd   = "<|im_end|>"
)

// renderQwen3 is Qwen3's template without tools: a leading system turn,
// ChatML turns, and assistant turns stripped of <think> reasoning unless
// they follow the last user query (then the reasoning is re-emitted in
// <think> tags).
func renderQwen3(msgs []Message, addGen bool, _ string) (string, error) {
	var b strings.Builder
	if msgs[0].Role == RoleSystem {
		b.WriteString(imStart + "system\n" + msgs[0].Content + imEnd + "\n")
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
			b.WriteString(imStart + m.Role + "\n" + m.Content + imEnd + "\n")
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
				b.WriteString(imStart + "assistant\n<think>\n" + strings.Trim(reasoning, "\n") + "\n</think>\n\n" + strings.TrimLeft(content, "\n"))
			} else {
				b.WriteString(imStart + "assistant\n" + content)
			}
			b.WriteString(imEnd + "\n")
		}
	}
	if addGen {
		b.WriteString(imStart + "assistant\n")
	}
	return b.String(), nil
}

// renderLlama3 is Meta-Llama-3-Instruct's original template: BOS, header
// turns with trimmed content, and always the assistant header (the
// template ignores add_generation_prompt).
func renderLlama3(msgs []Message, _ bool, bos string) (string, error) {
	var b strings.Builder
	for i, m := range msgs {
		if i == 0 {
			b.WriteString(bos)
		}
		b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + pyStrip(m.Content) + "<|eot_id|>")
	}
	b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	return b.String(), nil
}

// pyStrip is Jinja's trim filter (Python str.strip()): Python's whitespace
// is Unicode White_Space plus the ASCII separators U+001C…U+001F.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) })
}
