package enginesim

import (
	"bufio"
	"encoding/json"
	"errors"
	"hash/fnv"
	"net/http"
	"strconv"
	"time"

	"github.com/infergate/infergate/kvexact/bpe"
)

// Paths and wire fields of vLLM's OpenAI-compatible server.
const (
	pathCompletions     = "/v1/completions"
	pathChatCompletions = "/v1/chat/completions"
	pathTokenize        = "/tokenize"
	pathMetrics         = "/metrics"
	pathHealth          = "/health"
	pathModels          = "/v1/models"
	pathResetCache      = "/reset_prefix_cache"

	headerRequestID = "X-Request-Id"
	// HeaderEngine names the engine (its listening address) on every
	// generate response, so a benchmark behind a router can tell which
	// engine served a request; vLLM sends no such header.
	HeaderEngine = "X-Enginesim-Engine"

	kvDoRemoteDecode  = "do_remote_decode"
	kvDoRemotePrefill = "do_remote_prefill"
)

func (e *Engine) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathCompletions, func(w http.ResponseWriter, r *http.Request) { e.serveGenerate(w, r, false) })
	mux.HandleFunc("POST "+pathChatCompletions, func(w http.ResponseWriter, r *http.Request) { e.serveGenerate(w, r, true) })
	mux.HandleFunc("POST "+pathTokenize, e.serveTokenize)
	mux.Handle("GET "+pathMetrics, e.metricsHandler())
	mux.HandleFunc("GET "+pathHealth, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET "+pathModels, e.serveModels)
	mux.HandleFunc("POST "+pathResetCache, e.serveReset)
	return mux
}

// genRequest is the part of a completions or chat body the engine reads.
type genRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []bpe.Message   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	AddSpecialTokens    *bool                      `json:"add_special_tokens"`
	AddGenerationPrompt *bool                      `json:"add_generation_prompt"`
	KVTransferParams    map[string]json.RawMessage `json:"kv_transfer_params"`
}

// defaultMaxTokens is vLLM's completions default.
const defaultMaxTokens = 16

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "error", "message": msg, "type": http.StatusText(status), "code": status})
}

// tokens renders and tokenises a request as vLLM does: completions with
// add_special_tokens (default true), chats through the model's template
// with add_generation_prompt (default true) and no added special tokens.
func (e *Engine) tokens(g *genRequest, chat bool) ([]uint32, error) {
	if chat || g.Messages != nil {
		if len(g.Messages) == 0 {
			return nil, errors.New("messages must not be empty")
		}
		addGen := g.AddGenerationPrompt == nil || *g.AddGenerationPrompt
		text, err := e.cfg.Template.Render(g.Messages, addGen)
		if err != nil {
			return nil, err
		}
		return e.cfg.Tokenizer.Encode(text, g.AddSpecialTokens != nil && *g.AddSpecialTokens), nil
	}
	if len(g.Prompt) == 0 {
		return nil, errors.New("prompt is required")
	}
	var text string
	if err := json.Unmarshal(g.Prompt, &text); err == nil {
		return e.cfg.Tokenizer.Encode(text, g.AddSpecialTokens == nil || *g.AddSpecialTokens), nil
	}
	var ids []uint32
	if err := json.Unmarshal(g.Prompt, &ids); err != nil {
		return nil, errors.New("prompt must be a string or a list of token ids")
	}
	return ids, nil
}

func (e *Engine) serveTokenize(w http.ResponseWriter, r *http.Request) {
	var g genRequest
	if err := json.NewDecoder(r.Body).Decode(&g); err != nil {
		httpError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	ids, err := e.tokens(&g, false)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if ids == nil {
		ids = []uint32{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "max_model_len": e.cfg.MaxModelLen, "tokens": ids})
}

func (e *Engine) serveModels(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{map[string]any{
		"id": e.cfg.Model, "object": "model", "owned_by": "enginesim", "max_model_len": e.cfg.MaxModelLen}}})
}

func (e *Engine) serveReset(w http.ResponseWriter, _ *http.Request) {
	if !e.ResetPrefixCache() {
		httpError(w, http.StatusConflict, "requests are running; the prefix cache was not reset")
		return
	}
	w.WriteHeader(http.StatusOK)
}

func flagSet(kv map[string]json.RawMessage, name string) bool {
	var b bool
	return kv != nil && json.Unmarshal(kv[name], &b) == nil && b
}

// serveGenerate serves completions and chat completions, streamed or not.
func (e *Engine) serveGenerate(w http.ResponseWriter, r *http.Request, chat bool) {
	var g genRequest
	if err := json.NewDecoder(r.Body).Decode(&g); err != nil {
		httpError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	ids, err := e.tokens(&g, chat)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	maxTokens := defaultMaxTokens
	if g.MaxCompletionTokens != nil {
		maxTokens = *g.MaxCompletionTokens
	} else if g.MaxTokens != nil {
		maxTokens = *g.MaxTokens
	}
	req := Request{Tokens: ids, MaxTokens: maxTokens}
	prefillLeg := e.cfg.Role == RolePrefill && flagSet(g.KVTransferParams, kvDoRemoteDecode)
	if prefillLeg {
		req.MaxTokens = 1
	}
	if e.cfg.Role == RoleDecode && flagSet(g.KVTransferParams, kvDoRemotePrefill) {
		req.RemotePrefill = true
	}
	id := r.Header.Get(headerRequestID)
	if id == "" {
		id = strconv.FormatUint(e.ids.Add(1), 10)
	}
	s := e.submit(req)
	w.Header().Set(HeaderEngine, e.Addr())
	out := &responder{e: e, w: w, chat: chat, model: g.Model, id: id, created: time.Now().Unix(), seed: wordSeed(id)}
	if out.model == "" {
		out.model = e.cfg.Model
	}
	if g.Stream && !prefillLeg {
		out.stream(r, s, g.StreamOptions != nil && g.StreamOptions.IncludeUsage)
		return
	}
	out.whole(r, s, prefillLeg, g.KVTransferParams)
}

// responder writes one request's answer in the OpenAI shapes.
type responder struct {
	e       *Engine
	w       http.ResponseWriter
	chat    bool
	model   string
	id      string
	created int64
	seed    uint32
}

// outputWords are the simulated output tokens: common words that are one
// token each with a leading space in Llama/Qwen-style vocabularies, so a
// client that resends them (multi-turn) tokenises them predictably.
var outputWords = []string{"the", "of", "and", "to", "in", "is", "that", "for", "it", "as",
	"with", "was", "on", "be", "by", "this", "are", "from", "or", "an", "at", "not", "which", "have",
	"one", "can", "more", "all", "has", "but", "also", "other", "its", "new", "some", "time", "may",
	"first", "about", "their", "two", "would", "than", "been", "when", "into", "only", "most", "used"}

func wordSeed(id string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32()
}

func (o *responder) word(i int) string {
	return " " + outputWords[(o.seed+uint32(i)*7)%uint32(len(outputWords))]
}

func (o *responder) object() string {
	if o.chat {
		return "chat.completion"
	}
	return "text_completion"
}

func (o *responder) prefix() string {
	if o.chat {
		return "chatcmpl-"
	}
	return "cmpl-"
}

func (o *responder) usage(s *Seq, generated int) map[string]any {
	return map[string]any{"prompt_tokens": s.PromptTokens(), "completion_tokens": generated,
		"total_tokens": s.PromptTokens() + generated, "prompt_tokens_details": map[string]any{"cached_tokens": s.CachedTokens()}}
}

// wait returns the next event, cancelling the request if the client left.
func (o *responder) wait(r *http.Request, s *Seq) (Event, bool) {
	select {
	case ev, ok := <-s.Events():
		return ev, ok
	case <-r.Context().Done():
		o.e.cancel(s)
		return Event{}, false
	}
}

func (o *responder) stream(r *http.Request, s *Seq, includeUsage bool) {
	h := o.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	flusher, _ := o.w.(http.Flusher)
	bw := bufio.NewWriterSize(o.w, 1024)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		_, _ = bw.WriteString("data: ")
		_, _ = bw.Write(b)
		_, _ = bw.WriteString("\n\n")
		if err := bw.Flush(); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	generated, wroteHeader := 0, false
	for {
		ev, ok := o.wait(r, s)
		if !ok {
			return
		}
		if ev.Done {
			if ev.Err != nil && !wroteHeader {
				httpError(o.w, http.StatusBadRequest, ev.Err.Error())
				return
			}
			break
		}
		if !wroteHeader {
			o.w.WriteHeader(http.StatusOK)
			wroteHeader = true
			if o.chat && !send(o.chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
				o.e.cancel(s)
				return
			}
		}
		generated++
		var finish any
		if generated == s.req.MaxTokens {
			finish = "length"
		}
		var c map[string]any
		if o.chat {
			c = o.chunk(map[string]any{"content": o.word(ev.Index)}, finish)
		} else {
			c = o.chunk(o.word(ev.Index), finish)
		}
		if !send(c) {
			o.e.cancel(s)
			return
		}
	}
	if includeUsage {
		send(map[string]any{"id": o.prefix() + o.id, "object": o.object() + o.chunkSuffix(), "created": o.created,
			"model": o.model, "choices": []any{}, "usage": o.usage(s, generated)})
	}
	_, _ = bw.WriteString("data: [DONE]\n\n")
	_ = bw.Flush()
}

func (o *responder) chunkSuffix() string {
	if o.chat {
		return ".chunk"
	}
	return ""
}

func (o *responder) chunk(delta any, finish any) map[string]any {
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": finish}
	if o.chat {
		choice["delta"] = delta
	} else {
		choice["text"] = delta
	}
	return map[string]any{"id": o.prefix() + o.id, "object": o.object() + o.chunkSuffix(), "created": o.created,
		"model": o.model, "choices": []any{choice}}
}

func (o *responder) whole(r *http.Request, s *Seq, prefillLeg bool, kv map[string]json.RawMessage) {
	text := make([]byte, 0, 8*s.req.MaxTokens)
	generated := 0
	for {
		ev, ok := o.wait(r, s)
		if !ok {
			return
		}
		if ev.Done {
			if ev.Err != nil {
				httpError(o.w, http.StatusBadRequest, ev.Err.Error())
				return
			}
			break
		}
		text = append(text, o.word(ev.Index)...)
		generated++
	}
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": "length"}
	if o.chat {
		choice["message"] = map[string]any{"role": "assistant", "content": string(text)}
	} else {
		choice["text"] = string(text)
	}
	resp := map[string]any{"id": o.prefix() + o.id, "object": o.object(), "created": o.created, "model": o.model,
		"choices": []any{choice}, "usage": o.usage(s, generated)}
	if prefillLeg {
		resp["kv_transfer_params"] = map[string]any{
			kvDoRemotePrefill:   true,
			kvDoRemoteDecode:    false,
			"remote_block_ids":  blockIDs(s),
			"remote_engine_id":  o.e.cfg.EngineID,
			"remote_host":       hostOf(o.e.Addr()),
			"remote_port":       o.e.cfg.NixlPort,
			"remote_request_id": o.id,
			"tp_size":           1,
		}
	}
	w := o.w
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// blockIDs stands in for the prefill's block table (one id per prompt
// block); a decode only checks that some came.
func blockIDs(s *Seq) []int {
	n := (s.PromptTokens() + 15) / 16
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}

func hostOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i]
		}
	}
	return addr
}
