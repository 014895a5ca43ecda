package fakeengine

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// The rest of an OpenAI-compatible engine's HTTP surface (vLLM's and
// SGLang's servers answer these): each in the engine's wire format, each
// recorded like a completion (uploads record their size, not their bytes).
const (
	PathResponses      = "/v1/responses"
	PathMessages       = "/v1/messages"
	PathCountTokens    = "/v1/messages/count_tokens"
	PathEmbeddings     = "/v1/embeddings"
	PathTokenize       = "/tokenize"
	PathDetokenize     = "/detokenize"
	PathTranscriptions = "/v1/audio/transcriptions"
	PathSpeech         = "/v1/audio/speech"
	PathVersion        = "/version"

	// HeaderUploadBytes reports the bytes of the uploaded file part the
	// engine counted (transcriptions), so a test can check nothing was lost.
	HeaderUploadBytes = "X-Fake-Upload-Bytes"
	// FakeVersion is the /version answer.
	FakeVersion = "0.0.0-fakeengine"
)

// serveSurface answers the paths beyond completions; false when path is
// none of them.
func (s *Server) serveSurface(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodOptions {
		w.Header().Set("Allow", "GET, POST, OPTIONS, HEAD")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	switch r.URL.Path {
	case PathVersion:
		s.recordPlain(r, nil)
		writeJSON(w, http.StatusOK, map[string]string{"version": FakeVersion})
	case PathTranscriptions:
		s.transcribe(w, r)
	case PathResponses, PathMessages, PathCountTokens, PathEmbeddings, PathTokenize, PathDetokenize, PathSpeech:
		if r.Method != http.MethodPost {
			s.recordPlain(r, nil)
			w.Header().Set("Allow", http.MethodPost)
			writeErr(w, http.StatusMethodNotAllowed, "method not allowed")
			return true
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return true
		}
		var req map[string]json.RawMessage
		jerr := json.Unmarshal(body, &req)
		s.recordPlain(r, body)
		if jerr != nil {
			writeErr(w, http.StatusBadRequest, "invalid JSON: "+jerr.Error())
			return true
		}
		if code := int(s.status.Load()); code != 0 {
			writeErr(w, code, "injected failure")
			return true
		}
		stream := string(req["stream"]) == "true"
		switch r.URL.Path {
		case PathResponses:
			s.responses(w, stream)
		case PathMessages:
			s.messages(w, stream)
		case PathCountTokens:
			writeJSON(w, http.StatusOK, map[string]int{"input_tokens": len(body) / 4})
		case PathEmbeddings:
			writeJSON(w, http.StatusOK, map[string]any{"object": "list", "model": s.opts.Model,
				"data":  []any{map[string]any{"object": "embedding", "index": 0, "embedding": EmbeddingValue(req["encoding_format"], []float32{0.1, 0.2, 0.3})}},
				"usage": map[string]int{"prompt_tokens": len(body) / 4, "total_tokens": len(body) / 4}})
		case PathTokenize:
			writeJSON(w, http.StatusOK, map[string]any{"count": 3, "max_model_len": 4096, "tokens": []int{1, 2, 3}})
		case PathDetokenize:
			writeJSON(w, http.StatusOK, map[string]string{"prompt": "tok1 tok2 tok3"})
		case PathSpeech:
			w.Header().Set("Content-Type", "audio/mpeg")
			_, _ = w.Write([]byte("ID3\x04fake-mp3-" + s.opts.Name))
		}
	default:
		return false
	}
	return true
}

// recordPlain records a non-completion request.
func (s *Server) recordPlain(r *http.Request, body []byte) {
	if !s.opts.NoLog {
		s.record(Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, RequestID: r.Header.Get(HeaderRequestID)})
	}
}

// transcribe reads a multipart upload part by part without holding it: the
// file part is counted and discarded, like an engine streaming audio into
// its decoder. response_format=text answers text/plain.
func (s *Server) transcribe(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		s.recordPlain(r, nil)
		writeErr(w, http.StatusBadRequest, "expected multipart/form-data: "+err.Error())
		return
	}
	var fileBytes int64
	fields := map[string]string{}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			s.recordPlain(r, nil)
			writeErr(w, http.StatusBadRequest, "bad multipart body: "+err.Error())
			return
		}
		if p.FileName() != "" {
			n, err := io.Copy(io.Discard, p)
			if err != nil {
				writeErr(w, http.StatusBadRequest, "reading file part: "+err.Error())
				return
			}
			fileBytes += n
			continue
		}
		v, _ := io.ReadAll(io.LimitReader(p, 4096))
		fields[p.FormName()] = string(v)
	}
	rec := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), RequestID: r.Header.Get(HeaderRequestID),
		Body: []byte(fmt.Sprintf(`{"model":%q,"file_bytes":%d}`, fields["model"], fileBytes))}
	if !s.opts.NoLog {
		s.record(rec)
	}
	w.Header().Set(HeaderUploadBytes, strconv.FormatInt(fileBytes, 10))
	text := "fake transcription of " + strconv.FormatInt(fileBytes, 10) + " bytes"
	if fields["response_format"] == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, text)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"text": text})
}

// responses answers the Responses API: a response object, or its named SSE
// events (response.created, one response.output_text.delta per token,
// response.completed) with increasing sequence_number.
func (s *Server) responses(w http.ResponseWriter, stream bool) {
	id := "resp_" + s.opts.Name
	text := s.text()
	final := map[string]any{"id": id, "object": "response", "status": "completed", "model": s.opts.Model,
		"output": []any{map[string]any{"type": "message", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}},
		"usage": map[string]int{"input_tokens": 1, "output_tokens": s.opts.Tokens, "total_tokens": 1 + s.opts.Tokens}}
	if !stream {
		writeJSON(w, http.StatusOK, final)
		return
	}
	ev := s.sse(w)
	seq := 0
	send := func(typ string, v map[string]any) bool {
		v["type"], v["sequence_number"] = typ, seq
		seq++
		return ev(typ, v)
	}
	if !send("response.created", map[string]any{"response": map[string]any{"id": id, "object": "response", "status": "in_progress"}}) {
		return
	}
	for i := range s.opts.Tokens {
		if !send("response.output_text.delta", map[string]any{"item_id": "msg_" + s.opts.Name, "output_index": 0, "content_index": 0, "delta": "tok" + strconv.Itoa(i) + " "}) {
			return
		}
	}
	send("response.completed", map[string]any{"response": final})
}

// messages answers Anthropic's Messages API (vLLM's /v1/messages): a
// message object, or its event stream (message_start … message_stop).
func (s *Server) messages(w http.ResponseWriter, stream bool) {
	id := "msg_" + s.opts.Name
	if !stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": s.opts.Model,
			"content": []any{map[string]any{"type": "text", "text": s.text()}}, "stop_reason": "end_turn",
			"usage": map[string]int{"input_tokens": 1, "output_tokens": s.opts.Tokens}})
		return
	}
	ev := s.sse(w)
	// The Anthropic SDKs' stream accumulators need usage (and the null
	// stop fields) in message_start: message_delta's usage updates it.
	if !ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message", "role": "assistant",
		"content": []any{}, "model": s.opts.Model, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": 1, "output_tokens": 0}}}) ||
		!ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) {
		return
	}
	for i := range s.opts.Tokens {
		if !ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "tok" + strconv.Itoa(i) + " "}}) {
			return
		}
	}
	_ = ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) &&
		ev("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]int{"output_tokens": s.opts.Tokens}}) &&
		ev("message_stop", map[string]any{"type": "message_stop"})
}

// sse starts a named-event stream and returns its event writer.
func (s *Server) sse(w http.ResponseWriter) func(event string, v any) bool {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return func(event string, v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
}

func (s *Server) text() string {
	var b strings.Builder
	for i := range s.opts.Tokens {
		b.WriteString("tok" + strconv.Itoa(i) + " ")
	}
	return b.String()
}

// EmbeddingValue renders an embedding as the engines do: a float array, or
// with encoding_format "base64" (the OpenAI SDKs' default) the base64 of
// its little-endian float32s.
func EmbeddingValue(format json.RawMessage, v []float32) any {
	if string(format) != `"base64"` {
		return v
	}
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
