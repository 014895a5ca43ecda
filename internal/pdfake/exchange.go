package pdfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Wire names the fakes read (mirroring the engines' own request models).
const (
	fieldStream              = "stream"
	fieldModel               = "model"
	fieldMaxTokens           = "max_tokens"
	fieldMaxCompletionTokens = "max_completion_tokens"
	fieldKVTransferParams    = "kv_transfer_params"
	fieldBootstrapHost       = "bootstrap_host"
	fieldBootstrapPort       = "bootstrap_port"
	fieldBootstrapRoom       = "bootstrap_room"
	fieldDisaggParams        = "disaggregated_params"
	headerRequestID          = "X-Request-Id"
)

// exchange is one inference request being answered.
type exchange struct {
	e   *Engine
	w   http.ResponseWriter
	r   *http.Request
	rec *Record
	req map[string]json.RawMessage
}

func (x *exchange) setViolation(v string) { x.e.update(func() { x.rec.Violation = v }) }

// reject answers like the engines' validation layer (OpenAI error shape) and
// records the violation.
func (x *exchange) reject(status int, msg string) {
	x.setViolation(msg)
	x.writeError(status, msg)
}

func (x *exchange) writeError(status int, msg string) {
	typ := "BadRequestError"
	if status >= 500 {
		typ = "InternalServerError"
	}
	b, _ := json.Marshal(map[string]any{"object": "error", "message": msg, "type": typ, "code": status})
	x.w.Header().Set("Content-Type", "application/json")
	x.w.WriteHeader(status)
	_, _ = x.w.Write(b)
}

// stream reports whether the client asked for SSE.
func (x *exchange) stream() bool { return string(x.req[fieldStream]) == "true" }

// includeUsage reports stream_options.include_usage.
func (x *exchange) includeUsage() bool {
	var o struct {
		IncludeUsage bool `json:"include_usage"`
	}
	return json.Unmarshal(x.req["stream_options"], &o) == nil && o.IncludeUsage
}

func (x *exchange) chat() bool { return strings.HasSuffix(x.r.URL.Path, "/chat/completions") }

// waitGone parks until the client closes the connection (recorded as
// Cancelled) or the engine stops.
func (x *exchange) waitGone() {
	select {
	case <-x.r.Context().Done():
		x.e.update(func() { x.rec.Cancelled = true })
	case <-x.e.stop:
	}
}

// applyFault performs the request's injected fault; true means the request
// has been fully handled.
func (x *exchange) applyFault(f Fault) bool {
	streaming := strings.Contains(string(x.rec.Body), `"stream":true`) || strings.Contains(string(x.rec.Body), `"stream": true`)
	switch f {
	case FaultNone:
		return false
	case Fault500:
		x.writeError(http.StatusInternalServerError, "injected fault: internal error")
	case Fault400:
		x.writeError(http.StatusBadRequest, "injected fault: prompt over context window")
	case FaultDropBeforeFirstByte:
		x.drop()
	case FaultDropAfterFirstByte, FaultStall:
		if streaming {
			x.w.Header().Set("Content-Type", "text/event-stream")
			x.w.WriteHeader(http.StatusOK)
			_, _ = x.w.Write([]byte("data: {\"choices\":[{\"index\":0,\"text\":\"partial\"}]}\n\n"))
		} else {
			x.w.Header().Set("Content-Type", "application/json")
			x.w.Header().Set("Content-Length", "4096")
			x.w.WriteHeader(http.StatusOK)
			_, _ = x.w.Write([]byte(`{"id":"partial","choices":[`))
		}
		_ = http.NewResponseController(x.w).Flush()
		if f == FaultStall {
			x.waitGone()
			return true
		}
		x.drop()
	case FaultHang:
		x.waitGone()
	}
	return true
}

// drop closes the connection without completing the response.
func (x *exchange) drop() {
	conn, _, err := http.NewResponseController(x.w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // the server closes the connection
	}
	_ = conn.Close()
}

// answer writes a completion: JSON, or SSE token events then a finish event
// and [DONE]. extra decorates the first choice of the JSON answer.
func (x *exchange) answer(text, finish string, top, choiceExtra map[string]any) {
	h := x.w.Header()
	if id := x.r.Header.Get(headerRequestID); id != "" {
		h.Set(headerRequestID, id)
	}
	h.Set("X-Fake-Engine", x.e.engineID)
	id := "cmpl-" + strconv.Itoa(x.e.serveCount())
	if x.responses() {
		x.answerResponses(id, text, top)
		return
	}
	n := x.samples()
	if !x.stream() {
		if cut := false; text != "" {
			if text, cut = x.limitWords(text); cut {
				finish = finishLength
			}
		}
		choice := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
		obj := "text_completion"
		if x.chat() {
			obj = "chat.completion"
			choice["message"] = map[string]any{"role": "assistant", "content": text}
		} else {
			choice["text"] = text
		}
		for k, v := range choiceExtra {
			choice[k] = v
		}
		choices := []any{choice}
		for i := 1; i < n; i++ { // n samples: the same text, indexed
			c := map[string]any{}
			for k, v := range choice {
				c[k] = v
			}
			c["index"] = i
			choices = append(choices, c)
		}
		resp := map[string]any{
			"id": id, "object": obj, "created": time.Now().Unix(), "model": x.e.cfg.Model,
			"choices": choices,
			"usage":   map[string]any{"prompt_tokens": len(x.rec.Body) / 4, "completion_tokens": len(strings.Fields(text)), "total_tokens": len(x.rec.Body)/4 + len(strings.Fields(text))},
		}
		for k, v := range top {
			resp[k] = v
		}
		b, _ := json.Marshal(resp)
		h.Set("Content-Type", "application/json")
		x.w.WriteHeader(http.StatusOK)
		_, _ = x.w.Write(b)
		return
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(x.w)
	obj := "text_completion"
	if x.chat() {
		obj = "chat.completion.chunk"
	}
	event := func(tok string, fin any) bool {
		for i := 1; i < n; i++ { // the other samples' events, before sample 0's
			if !x.choiceEvent(id, obj, i, tok, fin) {
				return false
			}
		}
		choice := map[string]any{"index": 0, "finish_reason": fin}
		if x.chat() {
			choice["delta"] = map[string]any{"content": tok}
		} else {
			choice["text"] = tok
		}
		ev := map[string]any{"id": id, "object": obj, "model": x.e.cfg.Model, "choices": []any{choice}}
		for k, v := range top { // SGLang's meta_info rides on every streamed event
			ev[k] = v
		}
		b, _ := json.Marshal(ev)
		if _, err := fmt.Fprintf(x.w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	words := strings.Fields(text)
	chunks, cut := x.streamChunks()
	if cut && text != "" {
		finish = finishLength
	}
	for i := 0; i < chunks; i++ {
		if !event(tokenAt(words, i), nil) {
			x.e.update(func() { x.rec.Cancelled = true })
			return
		}
		if d := x.e.cfg.ChunkDelay; d > 0 {
			select {
			case <-time.After(d):
			case <-x.r.Context().Done():
				x.e.update(func() { x.rec.Cancelled = true })
				return
			}
		}
	}
	if !event("", finish) {
		return
	}
	if x.includeUsage() { // OpenAI/vLLM: a last chunk with empty choices and the usage
		n := chunks
		b, _ := json.Marshal(map[string]any{"id": id, "object": obj, "model": x.e.cfg.Model, "choices": []any{},
			"usage": map[string]any{"prompt_tokens": len(x.rec.Body) / 4, "completion_tokens": n, "total_tokens": len(x.rec.Body)/4 + n}})
		_, _ = fmt.Fprintf(x.w, "data: %s\n\n", b)
	}
	_, _ = x.w.Write([]byte("data: [DONE]\n\n"))
	_ = rc.Flush()
}

// choiceEvent writes one streamed event of choice index i.
func (x *exchange) choiceEvent(id, obj string, i int, tok string, fin any) bool {
	choice := map[string]any{"index": i, "finish_reason": fin}
	if x.chat() {
		choice["delta"] = map[string]any{"content": tok}
	} else {
		choice["text"] = tok
	}
	b, _ := json.Marshal(map[string]any{"id": id, "object": obj, "model": x.e.cfg.Model, "choices": []any{choice}})
	if _, err := fmt.Fprintf(x.w, "data: %s\n\n", b); err != nil {
		return false
	}
	return true
}

func (e *Engine) serveCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.served++
	return e.served
}
