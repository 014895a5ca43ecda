package tokenize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/metrics"
)

// Wire names of the OpenAI request body and of vLLM's /tokenize.
const (
	FieldModel       = "model"
	FieldPrompt      = "prompt"
	FieldMessages    = "messages"
	FieldTokens      = "tokens"
	FieldCount       = "count"
	FieldMaxModelLen = "max_model_len"

	// PathTokenize is vLLM's tokenisation route (also served by SGLang).
	PathTokenize = "/tokenize"

	// Request fields that change how the engine renders and tokenises a
	// prompt; forwarded to /tokenize as given and part of the cache key.
	FieldTools                = "tools"
	FieldChatTemplate         = "chat_template"
	FieldChatTemplateKwargs   = "chat_template_kwargs"
	FieldAddGenerationPrompt  = "add_generation_prompt"
	FieldContinueFinalMessage = "continue_final_message"
	FieldAddSpecialTokens     = "add_special_tokens"
)

// renderFields are the render-affecting fields, in the order of
// overlay.render; chatOnly marks those /tokenize accepts only with messages.
// Every name starts with t, c or a (mentionsRenderField relies on it).
var renderFields = []struct {
	name     string
	quoted   []byte
	chatOnly bool
}{
	{FieldTools, []byte(`"` + FieldTools + `"`), true},
	{FieldChatTemplate, []byte(`"` + FieldChatTemplate + `"`), true},
	{FieldChatTemplateKwargs, []byte(`"` + FieldChatTemplateKwargs + `"`), true},
	{FieldAddGenerationPrompt, []byte(`"` + FieldAddGenerationPrompt + `"`), true},
	{FieldContinueFinalMessage, []byte(`"` + FieldContinueFinalMessage + `"`), true},
	{FieldAddSpecialTokens, []byte(`"` + FieldAddSpecialTokens + `"`), false},
}

// Errors callers may count by kind.
var (
	// ErrNoPrompt: the body has neither a usable prompt nor messages.
	ErrNoPrompt = errors.New("tokenize: request has no prompt or messages")
	// ErrUnsupported: a prompt shape the tier does not tokenise (batches).
	ErrUnsupported = errors.New("tokenize: unsupported prompt shape")
	// ErrNoEndpoint: no healthy endpoint to ask.
	ErrNoEndpoint = errors.New("tokenize: no endpoint to ask")
)

// Request is what a tokenizer needs to know about a client request.
type Request struct {
	Model string // body "model" or X-Model; "" → taken from Body
	Path  string // client path: part of the cache key (chat and completions render differently)
	Body  []byte // the client body, read-only
	// Prompt and Messages, when the caller already scanned the body (raw
	// JSON values, nil when absent), spare a decode of Body; Model must then
	// be set too.
	Prompt, Messages json.RawMessage
}

// Tokenizer returns the prompt token ids of a request exactly as the engine
// computes them. Implementations must be safe for concurrent use.
type Tokenizer interface {
	Tokens(ctx context.Context, req Request) ([]uint32, error)
}

// Defaults of Options.
const (
	DefaultTimeout   = 50 * time.Millisecond
	DefaultMaxWait   = time.Second
	DefaultCacheSize = 4096
	DefaultMaxBody   = 16 << 20
)

// Options configures an engine-backed tokenizer.
type Options struct {
	Rule string // metric label and log field
	// Endpoints returns the host:port of the endpoints that may be asked
	// (healthy ones); they are tried round robin, one per request.
	Endpoints func() []string
	// Timeout bounds one engine round trip; a request waits at most this
	// (a long prompt longer when PerToken is set).
	Timeout time.Duration
	// PerToken, when set, lets a long prompt wait for its ids beyond
	// Timeout: up to the prefill a cache hit would save it (its bytes /
	// bytesPerToken × PerToken), at most MaxWait. Giving up costs the
	// request its cache affinity, that is the whole prefill when its
	// prefix is cached somewhere, so a wait shorter than that prefill is
	// worth it; an engine whose /tokenize slows under load (its API server
	// is busy with the same requests) otherwise sheds exactly the long
	// prompts affinity helps most.
	PerToken time.Duration
	// MaxWait caps the size-scaled wait (0: DefaultMaxWait).
	MaxWait time.Duration
	// CacheSize is the number of prompts whose ids are kept (LRU).
	CacheSize int
	// MaxResponse caps the /tokenize response body.
	MaxResponse int64
	Client      *http.Client // nil: a dedicated client
	Metrics     *metrics.KVRouting
	Logger      logrus.FieldLogger
}

// DefaultOptions returns the defaults for rule.
func DefaultOptions(rule string) Options {
	return Options{Rule: rule, Timeout: DefaultTimeout, MaxWait: DefaultMaxWait, CacheSize: DefaultCacheSize, MaxResponse: DefaultMaxBody}
}

// bytesPerToken estimates a prompt's tokens from its bytes before it is
// tokenised (BPE tokenizers average about four bytes of English per
// token); it only sizes the wait.
const bytesPerToken = 4

// wait is how long a prompt of n bytes may wait for its ids.
func (e *Engine) wait(n int) time.Duration {
	w := e.opts.Timeout
	if e.opts.PerToken > 0 {
		w = max(w, min(time.Duration(n/bytesPerToken)*e.opts.PerToken, e.opts.MaxWait))
	}
	return w
}

// Engine asks an engine's /tokenize, with an LRU cache and coalescing.
type Engine struct {
	opts   Options
	cache  *lru.Cache[uint64, []uint32]
	flight group
	rr     atomic.Uint64
}

// NewEngine builds an engine-backed tokenizer; zero option fields take defaults.
func NewEngine(opts Options) (*Engine, error) {
	d := DefaultOptions(opts.Rule)
	if opts.Timeout <= 0 {
		opts.Timeout = d.Timeout
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = d.MaxWait
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = d.CacheSize
	}
	if opts.MaxResponse <= 0 {
		opts.MaxResponse = d.MaxResponse
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}}
	}
	if opts.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		opts.Logger = l
	}
	if opts.Endpoints == nil {
		opts.Endpoints = func() []string { return nil }
	}
	c, err := lru.New[uint64, []uint32](opts.CacheSize)
	if err != nil {
		return nil, fmt.Errorf("tokenize: cache: %w", err)
	}
	return &Engine{opts: opts, cache: c}, nil
}

// Close releases idle connections.
func (e *Engine) Close() { e.opts.Client.CloseIdleConnections() }

// overlay is the part of an OpenAI body the tokenizer reads.
type overlay struct {
	Model    string          `json:"model"`
	Prompt   json.RawMessage `json:"prompt"`
	Messages json.RawMessage `json:"messages"`
	// Render-affecting fields, same order as renderFields.
	Tools                json.RawMessage `json:"tools"`
	ChatTemplate         json.RawMessage `json:"chat_template"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt  json.RawMessage `json:"add_generation_prompt"`
	ContinueFinalMessage json.RawMessage `json:"continue_final_message"`
	AddSpecialTokens     json.RawMessage `json:"add_special_tokens"`
}

func (o *overlay) render() [6]json.RawMessage {
	return [6]json.RawMessage{o.Tools, o.ChatTemplate, o.ChatTemplateKwargs, o.AddGenerationPrompt, o.ContinueFinalMessage, o.AddSpecialTokens}
}

// mentionsRenderField reports whether body may carry a render-affecting
// field: one pass over its quotes (bytes.Index per name cost 4 µs on a
// 1 KiB body), deciding whether the caller's pre-scanned prompt is enough.
func mentionsRenderField(body []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(body[i:], '"')
		if j < 0 || i+j+1 >= len(body) {
			return false
		}
		i += j + 1
		switch body[i] {
		case 't', 'c', 'a': // first letters of the render field names
			for _, f := range renderFields {
				if bytes.HasPrefix(body[i:], f.quoted[1:]) {
					return true
				}
			}
		}
	}
}

// Tokens returns the request's prompt token ids: the client's own ids when
// the prompt is a list of ints, else the engine's /tokenize answer (cached).
func (e *Engine) Tokens(ctx context.Context, req Request) ([]uint32, error) {
	ov := overlay{Model: req.Model, Prompt: req.Prompt, Messages: req.Messages}
	if req.Model == "" || (req.Prompt == nil && req.Messages == nil) || mentionsRenderField(req.Body) {
		if err := json.Unmarshal(req.Body, &ov); err != nil {
			return nil, fmt.Errorf("tokenize: body: %w", err)
		}
		if req.Model != "" {
			ov.Model = req.Model
		}
	}
	model := ov.Model
	field, raw := FieldMessages, ov.Messages
	if !present(raw) {
		field, raw = FieldPrompt, ov.Prompt
		if !present(raw) {
			return nil, ErrNoPrompt
		}
		switch raw[0] {
		case '"':
		case '[':
			ids, err := tokenIDs(raw)
			if err != nil {
				return nil, err
			}
			return ids, nil
		default:
			return nil, ErrUnsupported
		}
	}
	var extra []extraField
	for i, v := range ov.render() {
		if f := renderFields[i]; present(v) && (field == FieldMessages || !f.chatOnly) {
			extra = append(extra, extraField{f.name, v})
		}
	}
	key := cacheKey(model, req.Path, field, raw, extra)
	if ids, ok := e.cache.Get(key); ok {
		e.count(metrics.ResultHit)
		return ids, nil
	}
	return e.flight.do(ctx, key, e.wait(len(raw)), func(shared bool) {
		if shared {
			e.count(metrics.ResultShared)
		} else {
			e.count(metrics.ResultMiss)
		}
	}, func(fctx context.Context) ([]uint32, error) {
		ids, err := e.ask(fctx, model, field, raw, extra)
		if err == nil {
			e.cache.Add(key, ids)
		}
		return ids, err
	})
}

func (e *Engine) count(result string) {
	if m := e.opts.Metrics; m != nil {
		m.TokenizeCache.WithLabelValues(e.opts.Rule, result).Inc()
	}
}

// present reports whether a raw JSON field was given and is not null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// tokenIDs decodes a prompt given as a list of ints; a list of strings or
// of lists (a batch) is unsupported.
func tokenIDs(raw json.RawMessage) ([]uint32, error) {
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("%w: prompt list is not token ids", ErrUnsupported)
	}
	return ids, nil
}

// extraField is one render-affecting field forwarded to /tokenize.
type extraField struct {
	name string
	raw  json.RawMessage
}

// cacheKey hashes what determines the engine's tokenisation.
func cacheKey(model, path, field string, raw []byte, extra []extraField) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(model)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(path)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(field)
	_, _ = d.Write([]byte{0})
	_, _ = d.Write(raw)
	for _, x := range extra {
		_, _ = d.Write([]byte{0})
		_, _ = d.WriteString(x.name)
		_, _ = d.Write([]byte{0})
		_, _ = d.Write(x.raw)
	}
	return d.Sum64()
}

// tokenizeResponse is vLLM's /tokenize answer.
type tokenizeResponse struct {
	Tokens      []uint32 `json:"tokens"`
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
}

// ask sends one /tokenize to the next endpoint.
func (e *Engine) ask(ctx context.Context, model, field string, raw json.RawMessage, extra []extraField) ([]uint32, error) {
	eps := e.opts.Endpoints()
	if len(eps) == 0 {
		return nil, ErrNoEndpoint
	}
	ep := eps[int(e.rr.Add(1)-1)%len(eps)]
	req := map[string]any{FieldModel: model, field: raw}
	for _, x := range extra {
		req[x.name] = x.raw
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("tokenize: encode: %w", err)
	}
	start := time.Now()
	ids, err := e.post(ctx, ep, body)
	result := metrics.ResultOK
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		result = metrics.ResultTimeout
	case err != nil:
		result = metrics.ResultError
	}
	if m := e.opts.Metrics; m != nil {
		m.TokenizeDuration.WithLabelValues(e.opts.Rule, result).Observe(time.Since(start).Seconds())
	}
	if err != nil {
		e.opts.Logger.WithFields(logrus.Fields{"rule": e.opts.Rule, "endpoint": ep, "result": result}).
			WithError(err).Debug("tokenize: engine tokenisation failed, KV-exact falls through")
	}
	return ids, err
}

func (e *Engine) post(ctx context.Context, ep string, body []byte) ([]uint32, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ep+PathTokenize, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("tokenize: request to %s: %w", ep, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := e.opts.Client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", ep, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("tokenize: %s answered %d", ep, resp.StatusCode)
	}
	var tr tokenizeResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, e.opts.MaxResponse)).Decode(&tr); err != nil {
		return nil, fmt.Errorf("tokenize: %s: decode answer: %w", ep, err)
	}
	if tr.Count != 0 && tr.Count != len(tr.Tokens) {
		return nil, fmt.Errorf("tokenize: %s: count %d but %d tokens", ep, tr.Count, len(tr.Tokens))
	}
	return tr.Tokens, nil
}

// group coalesces concurrent calls with the same key (a minimal
// singleflight: golang.org/x/sync is not a dependency and the semantics we
// need differ — the flight runs detached from any one caller's context, with
// its own deadline, so one impatient client does not fail the others).
type group struct {
	mu    sync.Mutex
	calls map[uint64]*call
}

type call struct {
	done chan struct{}
	ids  []uint32
	err  error
}

// do runs fn once per key at a time; callers wait for the result, their
// own context or the timeout. joined is told, before waiting, whether the
// caller joined another's flight.
func (g *group) do(ctx context.Context, key uint64, timeout time.Duration, joined func(shared bool), fn func(context.Context) ([]uint32, error)) ([]uint32, error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[uint64]*call{}
	}
	c, shared := g.calls[key]
	if !shared {
		c = &call{done: make(chan struct{})}
		g.calls[key] = c
		go func() {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			c.ids, c.err = fn(fctx)
			g.mu.Lock()
			delete(g.calls, key)
			g.mu.Unlock()
			close(c.done)
		}()
	}
	g.mu.Unlock()
	joined(shared)
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	select {
	case <-c.done:
		return c.ids, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("tokenize: %w", ctx.Err())
	case <-wait.C:
		return nil, fmt.Errorf("tokenize: waiting for a shared tokenisation: %w", context.DeadlineExceeded)
	}
}
