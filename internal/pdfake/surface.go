package pdfake

import (
	"encoding/json"
	"fmt"
	"github.com/infergate/infergate/internal/fakeengine"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The side of the engines' surface a P/D gateway must route without a
// P/D sequence (tokenizer, embeddings, token counts, version, models,
// health), and the generation APIs beyond completions: /v1/responses runs
// through the dialects like completions; /v1/messages (vLLM's Anthropic
// API) carries no transfer fields, so an SGLang decode rejects it (no
// bootstrap room) and vLLM/TRT-LLM engines serve it standalone.
const (
	pathResponses   = "/v1/responses"
	pathMessages    = "/v1/messages"
	pathCountTokens = "/v1/messages/count_tokens"
	pathDetokenize  = "/detokenize"
	pathEmbeddings  = "/v1/embeddings"
	pathVersion     = "/version"

	fieldMaxOutputTokens = "max_output_tokens"
	fieldN               = "n"
	// Version is every fake's /version answer.
	Version = "0.0.0-pdfake"
)

// registerSurface wires the side paths and /v1/responses, /v1/messages.
func (e *Engine) registerSurface(mux *http.ServeMux) {
	mux.HandleFunc("POST "+pathResponses, e.serveInference)
	mux.HandleFunc("POST "+pathMessages, e.serveMessages)
	if e.cfg.Dialect != VLLM { // vLLM's comes with the KV tokenizer (kv_publish.go)
		mux.HandleFunc("POST "+pathTokenize, func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, map[string]any{fieldTokens: []int{1, 2, 3}, fieldCount: 3})
		})
	}
	mux.HandleFunc("POST "+pathDetokenize, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]string{"prompt": "tok1 tok2 tok3"})
	})
	mux.HandleFunc("POST "+pathEmbeddings, func(w http.ResponseWriter, r *http.Request) {
		var req map[string]json.RawMessage
		_ = json.NewDecoder(r.Body).Decode(&req)
		writeJSON(w, map[string]any{"object": "list", "model": e.cfg.Model,
			"data": []any{map[string]any{"object": "embedding", "index": 0, "embedding": fakeengine.EmbeddingValue(req["encoding_format"], []float32{0.5, 0.25})}}})
	})
	mux.HandleFunc("POST "+pathCountTokens, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		writeJSON(w, map[string]int{"input_tokens": len(b) / 4})
	})
	mux.HandleFunc("GET "+pathVersion, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]string{"version": Version})
	})
}

// sideLogged reports the paths kept in the side log (everything that is
// not an inference leg or the fakes' admin API).
func sideLogged(path string) bool {
	switch path {
	case "/v1/completions", "/v1/chat/completions", pathResponses, pathMessages:
		return false
	}
	return !strings.HasPrefix(path, "/admin/")
}

// recordSide wraps the mux: side-path requests (method, path, header, body)
// go to the side log, so a test can prove exactly one endpoint served one.
func (e *Engine) recordSide(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sideLogged(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		rec := Record{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Done: true}
		e.update(func() { e.side = append(e.side, rec) })
		w.Header().Set("X-Fake-Engine", e.engineID)
		next.ServeHTTP(w, r)
	})
}

// SideRequests returns the side-path requests received so far.
func (e *Engine) SideRequests() []Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Record(nil), e.side...)
}

// serveMessages answers Anthropic's Messages API, recorded as an inference
// request.
func (e *Engine) serveMessages(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rec := &Record{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	e.update(func() { e.records = append(e.records, rec) })
	defer e.update(func() { rec.Done = true })
	x := &exchange{e: e, w: w, r: r, rec: rec}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		x.reject(http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	x.req = req
	if e.cfg.Dialect == SGLang && e.cfg.Role == Decode {
		// A PD-mode SGLang decode cannot run without a prefill room.
		x.reject(http.StatusBadRequest, "TRIPLE-MISSING")
		return
	}
	w.Header().Set("X-Fake-Engine", e.engineID)
	x.answerMessage(fmt.Sprintf("Hello from the fake %s %s.", e.cfg.Dialect, e.cfg.Role))
}

// answerMessage writes an Anthropic Messages answer: a message object, or
// the complete event sequence the Anthropic SDKs' stream accumulators
// expect: message_start (a message with empty content, null stop_reason
// and usage), content_block_start, one content_block_delta per token,
// content_block_stop, message_delta (stop_reason, output usage) and
// message_stop.
func (x *exchange) answerMessage(text string) {
	id := "msg_" + strconv.Itoa(x.e.serveCount())
	inTokens := len(x.rec.Body) / 4
	if !x.stream() {
		out, cut := x.limitWords(text)
		reason := stopReasonEndTurn
		if cut {
			reason = stopReasonMaxToken
		}
		writeJSON(x.w, map[string]any{"id": id, "type": "message", "role": "assistant", "model": x.e.cfg.Model,
			"content": []any{map[string]any{"type": "text", "text": out}}, "stop_reason": reason, "stop_sequence": nil,
			"usage": map[string]int{"input_tokens": inTokens, "output_tokens": len(strings.Fields(out))}})
		return
	}
	ev := namedEvents(x.w)
	chunks, cut := x.streamChunks()
	reason := stopReasonEndTurn
	if cut {
		reason = stopReasonMaxToken
	}
	if !ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message",
		"role": "assistant", "model": x.e.cfg.Model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": inTokens, "output_tokens": 0}}}) ||
		!ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}}) {
		return
	}
	words := strings.Fields(text)
	for i := 0; i < chunks; i++ {
		if !ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": tokenAt(words, i)}}) {
			x.e.update(func() { x.rec.Cancelled = true })
			return
		}
	}
	_ = ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) &&
		ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": reason, "stop_sequence": nil},
			"usage": map[string]int{"output_tokens": chunks}}) &&
		ev("message_stop", map[string]any{"type": "message_stop"})
}

// answerResponses writes a Responses API answer: a response object (top
// merged in, e.g. kv_transfer_params), or its event stream ending with
// response.completed.
func (x *exchange) answerResponses(id, text string, top map[string]any) {
	full := text
	text, _ = x.limitWords(text)
	final := map[string]any{"id": "resp_" + id, "object": "response", "status": "completed", "model": x.e.cfg.Model,
		"output": []any{map[string]any{"type": "message", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text}}}}}
	for k, v := range top {
		final[k] = v
	}
	if !x.stream() {
		writeJSON(x.w, final)
		return
	}
	ev := namedEvents(x.w)
	seq := 0
	send := func(typ string, v map[string]any) bool {
		v["type"], v["sequence_number"] = typ, seq
		seq++
		return ev(typ, v)
	}
	if !send("response.created", map[string]any{"response": map[string]any{"id": "resp_" + id, "status": "in_progress"}}) {
		return
	}
	words := strings.Fields(full)
	chunks, _ := x.streamChunks()
	for i := 0; i < chunks; i++ {
		if !send("response.output_text.delta", map[string]any{"output_index": 0, "content_index": 0, "delta": tokenAt(words, i)}) {
			x.e.update(func() { x.rec.Cancelled = true })
			return
		}
	}
	send("response.completed", map[string]any{"response": final})
}

// namedEvents starts an SSE stream of named events.
func namedEvents(w http.ResponseWriter) func(event string, v any) bool {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	return func(event string, v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// samples is the request's n (1 when absent or not a positive integer).
func (x *exchange) samples() int {
	n, err := strconv.Atoi(string(x.req[fieldN]))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func (x *exchange) responses() bool { return x.r.URL.Path == pathResponses }
