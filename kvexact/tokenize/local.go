package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/jsonscan"
	"github.com/infergate/infergate/kvexact/bpe"
)

// File names looked for in a tokenizer directory (Hugging Face layout).
const (
	FileTokenizer       = "tokenizer.json"
	FileTokenizerGz     = "tokenizer.json.gz"
	FileTokenizerConfig = "tokenizer_config.json"
)

// AnyModel is the LocalOptions.Models key used for a model without its own
// entry.
const AnyModel = ""

// LocalOptions configures the in-process tokenizer.
type LocalOptions struct {
	// Models maps a model name (the request's "model") to a tokenizer
	// directory (tokenizer.json or tokenizer.json.gz, and
	// tokenizer_config.json for chat) or to a tokenizer.json file.
	// AnyModel serves every other model.
	Models map[string]string
	// Cache bounds each loaded tokenizer's caches (zero fields: bpe's
	// defaults).
	Cache  bpe.Options
	Logger logrus.FieldLogger
}

// Local tokenises in process with the model's own tokenizer.json
// (kvexact/bpe), exactly as the engine would. Requests it cannot reproduce
// exactly — no tokenizer for the model, a chat template the renderers do
// not know, tools, multimodal content, render overrides — return an error
// wrapping ErrUnsupported, so a Chain can ask the engine instead.
// Tokenizers load lazily on first use; a failed load is remembered and
// warned about once. Safe for concurrent use; shared by every rule.
type Local struct {
	opts LocalOptions
	// loaded has one entry per configured path, made by NewLocal and
	// read-only afterwards, so a request finds its model without a lock;
	// each entry loads on first use (localModel.once).
	loaded map[string]*localModel
}

type localModel struct {
	once sync.Once
	path string
	tok  *bpe.Tokenizer
	tmpl bpe.Template
	err  error // load failure: every request is unsupported
	chat error // chat template unavailable: chat requests are unsupported
}

// NewLocal builds the in-process tokenizer; nil when no model is
// configured.
func NewLocal(o LocalOptions) *Local {
	if len(o.Models) == 0 {
		return nil
	}
	if o.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.Logger = l
	}
	o.Models = maps.Clone(o.Models) // a caller's later edit cannot name an unloaded path
	loaded := make(map[string]*localModel, len(o.Models))
	for _, path := range o.Models {
		if loaded[path] == nil {
			loaded[path] = &localModel{path: path}
		}
	}
	return &Local{opts: o, loaded: loaded}
}

// Preload loads every configured tokenizer now (daemon start) and returns
// the load errors, so a wrong path is reported at startup, not at the
// first request.
func (l *Local) Preload() error {
	if l == nil {
		return nil
	}
	var errs []error
	for model, path := range l.opts.Models {
		if m := l.model(model); m != nil && m.err != nil {
			errs = append(errs, fmt.Errorf("tokenizer for model %q (%s): %w", model, path, m.err))
		}
	}
	return errors.Join(errs...)
}

func (l *Local) model(name string) *localModel {
	path, ok := l.opts.Models[name]
	if !ok {
		if path, ok = l.opts.Models[AnyModel]; !ok {
			return nil
		}
	}
	m := l.loaded[path]
	m.once.Do(func() { m.load(l.opts.Cache, l.opts.Logger) })
	return m
}

func (m *localModel) load(cache bpe.Options, log logrus.FieldLogger) {
	file, cfg := m.path, ""
	if st, err := os.Stat(m.path); err == nil && st.IsDir() {
		file = filepath.Join(m.path, FileTokenizer)
		if _, err := os.Stat(file); err != nil {
			file = filepath.Join(m.path, FileTokenizerGz)
		}
		cfg = filepath.Join(m.path, FileTokenizerConfig)
	} else {
		cfg = filepath.Join(filepath.Dir(m.path), FileTokenizerConfig)
	}
	if m.tok, m.err = bpe.LoadFileWith(file, cache); m.err != nil {
		log.WithError(m.err).WithField("path", m.path).Warn("tokenize: in-process tokenizer not loaded; KV-exact asks the engine's /tokenize for this model")
		return
	}
	if m.tmpl, m.chat = bpe.LoadTemplate(cfg); m.chat != nil {
		log.WithError(m.chat).WithField("path", m.path).Warn("tokenize: no built-in chat template for this tokenizer; chat requests ask the engine's /tokenize")
	}
	log.WithFields(logrus.Fields{"path": file, "sha256": m.tok.SHA256(), "chat_template": m.tmpl.Name,
		"segment_cache_bytes": m.tok.Options().SegmentCacheBytes, "segment_trial_bytes": m.tok.Options().SegmentTrialBytes}).Info("tokenize: in-process tokenizer loaded")
}

// unsupported wraps why a request is not tokenised locally.
func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: in-process: "+format, append([]any{ErrUnsupported}, args...)...)
}

// Tokens implements Tokenizer.
func (l *Local) Tokens(_ context.Context, req Request) ([]uint32, error) {
	ov := overlay{Model: req.Model, Prompt: req.Prompt, Messages: req.Messages}
	if req.Model == "" || (req.Prompt == nil && req.Messages == nil) || mentionsRenderField(req.Body) {
		if err := json.Unmarshal(req.Body, &ov); err != nil {
			return nil, fmt.Errorf("tokenize: body: %w", err)
		}
		if req.Model != "" {
			ov.Model = req.Model
		}
	}
	if present(ov.Tools) || present(ov.ChatTemplate) || present(ov.ChatTemplateKwargs) {
		return nil, unsupported("tools or chat template overrides")
	}
	if !present(ov.Messages) && present(ov.Prompt) && ov.Prompt[0] == '[' {
		return tokenIDs(ov.Prompt) // the client's own ids need no tokenizer
	}
	m := l.model(ov.Model)
	switch {
	case m == nil:
		return nil, unsupported("no tokenizer configured for model %q", ov.Model)
	case m.err != nil:
		return nil, unsupported("tokenizer for model %q did not load", ov.Model)
	}
	if present(ov.Messages) {
		return m.chatTokens(ov)
	}
	if !present(ov.Prompt) {
		return nil, ErrNoPrompt
	}
	if ov.Prompt[0] != '"' {
		return nil, ErrUnsupported
	}
	var prompt string
	if err := json.Unmarshal(ov.Prompt, &prompt); err != nil {
		return nil, fmt.Errorf("tokenize: prompt: %w", err)
	}
	special, err := boolField(ov.AddSpecialTokens, true) // vLLM completions default
	if err != nil {
		return nil, err
	}
	return m.tok.Encode(prompt, special), nil
}

func (m *localModel) chatTokens(ov overlay) ([]uint32, error) {
	if m.chat != nil {
		return nil, unsupported("no built-in chat template")
	}
	if cont, err := boolField(ov.ContinueFinalMessage, false); err != nil || cont {
		return nil, unsupported("continue_final_message")
	}
	if special, err := boolField(ov.AddSpecialTokens, false); err != nil || special {
		return nil, unsupported("add_special_tokens on a chat")
	}
	addGen, err := boolField(ov.AddGenerationPrompt, true)
	if err != nil {
		return nil, err
	}
	text, _ := messageTexts.Get().(*[]byte)
	if text == nil {
		text = new([]byte)
	}
	defer func() {
		if cap(*text) <= messageTextsMax {
			messageTexts.Put(text)
		}
	}()
	msgs, err := plainMessages(ov.Messages, text)
	if err != nil {
		return nil, err
	}
	ids, err := m.tok.EncodeChat(m.tmpl, msgs, addGen)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	return ids, nil
}

// messageTexts holds the buffers plainMessages decodes message texts into,
// between requests; one grown past messageTextsMax (a long-context prompt)
// is left to the collector.
var messageTexts sync.Pool

const messageTextsMax = 256 << 10

// plainMessages decodes messages that carry only a role and a string
// content; anything else (multimodal parts, tool calls, names) is not
// reproduced in process. It walks the list in place (one strict pass, as
// encoding/json validates it) and decodes each string once: a long prompt
// is neither copied into per-message maps nor scanned three times. The
// roles and contents are decoded into *text (reset first, grown as needed)
// and the messages' strings view it: they are valid until the caller
// reuses *text, so they must not outlive the request.
func plainMessages(raw json.RawMessage, text *[]byte) ([]bpe.Message, error) {
	*text = (*text)[:0]
	// view decodes a string body into *text and returns it as a string over
	// those bytes. A later append may move *text: the strings already made
	// keep the old array alive, and nothing writes to it again.
	view := func(body []byte) (string, error) {
		start := len(*text)
		b, err := jsonscan.AppendString(*text, body)
		if err != nil {
			return "", err
		}
		*text = b
		return unsafe.String(unsafe.SliceData(b[start:]), len(b)-start), nil
	}
	notList := func() error { return unsupported("messages are not a list of objects") } // built only when refused
	it := jsonscan.ArrayElements(raw, jsonscan.SkipSpace(raw, 0), jsonscan.Strict)
	var out []bpe.Message
	for it.Next() {
		el := it.Element()
		i := len(out)
		var role, content []byte // raw values; nil when absent
		switch raw[el.Start] {
		case '{':
		case 'n': // null decodes to an empty map, which has no content
			return nil, unsupported("messages[%d].content is not a string", i)
		default:
			return nil, notList()
		}
		members := jsonscan.ObjectMembers(raw, el.Start, jsonscan.Loose) // validated by the strict array walk
		for members.Next() {
			m := members.Member()
			v := raw[m.Value.Start:m.Value.End]
			switch {
			case m.KeyIs(raw, "role"):
				role = v
			case m.KeyIs(raw, "content"):
				content = v
			default:
				k, _ := jsonscan.String(raw[m.Key.Start:m.Key.End])
				return nil, unsupported("messages[%d].%s", i, k)
			}
		}
		if len(content) == 0 || content[0] != '"' {
			return nil, unsupported("messages[%d].content is not a string", i)
		}
		msg := bpe.Message{}
		switch {
		case len(role) > 0 && role[0] == '"':
			r, err := view(role[1 : len(role)-1])
			if err != nil {
				return nil, unsupported("messages[%d].role", i)
			}
			msg.Role = r
		case string(role) == "null": // encoding/json leaves the string empty
		default:
			return nil, unsupported("messages[%d].role", i)
		}
		c, err := view(content[1 : len(content)-1])
		if err != nil {
			return nil, unsupported("messages[%d].content", i)
		}
		msg.Content = c
		out = append(out, msg)
	}
	if it.Err() != nil || jsonscan.SkipSpace(raw, it.End()) != len(raw) {
		return nil, notList()
	}
	if out == nil {
		out = []bpe.Message{}
	}
	return out, nil
}

func boolField(raw json.RawMessage, def bool) (bool, error) {
	if !present(raw) {
		return def, nil
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, unsupported("non-boolean render flag %s", raw)
	}
	return v, nil
}

// Results of loxilb_kv_local_tokenize_total.
const (
	LocalOK       = "ok"       // tokenised in process
	LocalFallback = "fallback" // asked the engine instead
	LocalNone     = "none"     // neither could: the tier falls through
)

// Chain tokenises in process and asks the engine only for what the
// in-process tokenizer cannot reproduce exactly.
type Chain struct {
	Local    *Local    // nil: always the fallback
	Fallback Tokenizer // nil: none (TensorRT-LLM has no /tokenize)
	// Results counts outcomes by result for one rule (nil: not counted).
	Results *prometheus.CounterVec
	Rule    string
}

// Tokens implements Tokenizer.
func (c Chain) Tokens(ctx context.Context, req Request) ([]uint32, error) {
	if c.Local != nil {
		ids, err := c.Local.Tokens(ctx, req)
		if err == nil || !errors.Is(err, ErrUnsupported) || c.Fallback == nil {
			c.count(err == nil)
			return ids, err
		}
	}
	if c.Fallback == nil {
		c.count(false)
		return nil, ErrUnsupported
	}
	ids, err := c.Fallback.Tokens(ctx, req)
	if c.Results != nil && c.Local != nil {
		c.Results.WithLabelValues(c.Rule, LocalFallback).Inc()
	}
	return ids, err
}

func (c Chain) count(ok bool) {
	if c.Results == nil || c.Local == nil {
		return
	}
	r := LocalNone
	if ok {
		r = LocalOK
	}
	c.Results.WithLabelValues(c.Rule, r).Inc()
}
