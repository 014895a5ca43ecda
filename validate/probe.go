package validate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// Wire field names of the OpenAI-compatible probe bodies and answers.
const (
	fieldModel     = "model"
	fieldPrompt    = "prompt"
	fieldMaxTokens = "max_tokens"
	fieldStream    = "stream"
	fieldChoices   = "choices"
	fieldID        = "id"
	fieldError     = "error"
	fieldCode      = "code"

	headerContentType = "Content-Type"
	headerRequestID   = "X-Request-Id"
	contentTypeJSON   = "application/json"
	contentTypeSSE    = "text/event-stream"
	sseData           = "data:"
	sseDone           = "[DONE]"

	pathModels          = "/v1/models"
	pathHealth          = "/health"
	pathCompletions     = "/v1/completions"
	pathChatCompletions = "/v1/chat/completions"
	fieldMessages       = "messages"
	fieldMaxModelLen    = "max_model_len"
	// excerptBytes bounds how much of an engine's error body a summary quotes.
	excerptBytes = 240

	// maxProbeBody bounds what is read of one answer.
	maxProbeBody = 4 << 20
	probeTokens  = 8
)

// probeResult is one request through the VIP.
type probeResult struct {
	status    int
	requestID string
	events    int  // SSE data events (stream only)
	done      bool // SSE [DONE] seen
	body      []byte
	elapsed   time.Duration
	err       error
	errCode   string // the gateway's error code on a non-2xx answer
	rateLimit string // x-ratelimit-limit-* headers (tenant controls), concatenated
}

// sharedPrefix is the system text of the cache-aware probe: long enough to
// span many KV blocks and prefix-index boundaries, yet inside a context of
// maxLen tokens (0: unknown) with room for the question and the answer
// (one token per byte at most, see tier15Size).
func sharedPrefix(maxLen int) string {
	const line = "You are the infergate validation assistant. Answer briefly and precisely. "
	n := 64
	if maxLen > 0 {
		n = min(n, max(1, (maxLen-probeTokens-tier15ContextSlack-questionBytes)/len(line)))
	}
	return strings.Repeat(line, n)
}

// questionBytes bounds the per-probe question appended to sharedPrefix.
const questionBytes = 64

// probeBody is a completions body, or a chat body (one user message) for
// a path ending in /chat/completions.
func probeBody(path, model, prompt string, stream bool) []byte {
	m := map[string]any{
		fieldModel:     model,
		fieldMaxTokens: probeTokens,
		fieldStream:    stream,
	}
	if strings.HasSuffix(path, pathChatCompletions) {
		m[fieldMessages] = []map[string]string{{"role": "user", "content": prompt}}
	} else {
		m[fieldPrompt] = prompt
	}
	b, _ := json.Marshal(m)
	return b
}

// otherPath is the OpenAI path a probe tries when path does not stream.
func otherPath(path string) string {
	switch path {
	case pathCompletions:
		return pathChatCompletions
	case pathChatCompletions:
		return pathCompletions
	}
	return ""
}

// bodyExcerpt quotes the start of an engine's error body for a summary.
func bodyExcerpt(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ""
	}
	if len(b) > excerptBytes {
		b = append(b[:excerptBytes:excerptBytes], "…"...)
	}
	return ": " + string(b)
}

// modelCard is one /v1/models entry: its id and, from vLLM, the context
// length the engine was started with.
type modelCard struct {
	id     string
	maxLen int
}

type modelCards []modelCard

// maxLen is the context length of model (any model when "" or not
// listed); 0 when the engine does not say.
func (ms modelCards) maxLen(model string) int {
	for _, m := range ms {
		if m.id == model {
			return m.maxLen
		}
	}
	n := 0
	for _, m := range ms {
		if m.maxLen > 0 && (n == 0 || m.maxLen < n) {
			n = m.maxLen
		}
	}
	return n
}

// send posts one probe to the rule's VIP on --path and reads the whole
// answer.
func (w *workflow) send(ctx context.Context, prompt string, stream bool) probeResult {
	return w.sendPath(ctx, w.opts.Path, prompt, stream)
}

// sendPath posts one probe to the rule's VIP on path, with the tenant API
// key when one was given (Options.APIKey), so keyed rules can be validated.
func (w *workflow) sendPath(ctx context.Context, path, prompt string, stream bool) probeResult {
	return w.sendAuth(ctx, path, prompt, stream, bearer(w.opts.APIKey))
}

// bearer sets Authorization: Bearer key (none for "").
func bearer(key string) func(http.Header) {
	return func(h http.Header) {
		if key != "" {
			h.Set("Authorization", "Bearer "+key)
		}
	}
}

// sendAuth is sendPath with the key headers set by auth.
func (w *workflow) sendAuth(ctx context.Context, path, prompt string, stream bool, auth func(http.Header)) probeResult {
	start := time.Now()
	url := w.vipScheme + "://" + w.vip + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(probeBody(path, w.model, prompt, stream)))
	if err != nil {
		return probeResult{err: err}
	}
	req.Header.Set(headerContentType, contentTypeJSON)
	auth(req.Header)
	if w.compiled.Key.Host != "" {
		req.Host = w.compiled.Key.Host
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return probeResult{err: fmt.Errorf("POST %s: %w", url, err), elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	res := probeResult{status: resp.StatusCode, requestID: resp.Header.Get(headerRequestID),
		rateLimit: resp.Header.Get("X-Ratelimit-Limit-Requests") + resp.Header.Get("X-Ratelimit-Limit-Tokens")}
	if stream && resp.StatusCode == http.StatusOK {
		if ct := resp.Header.Get(headerContentType); !strings.HasPrefix(ct, contentTypeSSE) {
			res.err = fmt.Errorf("stream answered with Content-Type %q, want %s", ct, contentTypeSSE)
		}
		sc := bufio.NewScanner(io.LimitReader(resp.Body, maxProbeBody))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, sseData) {
				continue
			}
			if strings.TrimSpace(strings.TrimPrefix(line, sseData)) == sseDone {
				res.done = true
				continue
			}
			res.events++
		}
		if err := sc.Err(); err != nil && res.err == nil {
			res.err = fmt.Errorf("read stream: %w", err)
		}
		res.elapsed = time.Since(start)
		return res
	}
	res.body, err = io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	res.elapsed = time.Since(start)
	if err != nil {
		res.err = fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		res.errCode = errorCode(res.body)
	}
	return res
}

// errorCode extracts error.code (the gateway's stable code) from a body.
func errorCode(body []byte) string {
	var env map[string]json.RawMessage
	if json.Unmarshal(body, &env) != nil {
		return ""
	}
	var e map[string]any
	if json.Unmarshal(env[fieldError], &e) != nil {
		return ""
	}
	s, _ := e[fieldCode].(string)
	return s
}

// hasChoices reports whether a completion answer carries choices.
func hasChoices(body []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return false
	}
	c := bytes.TrimSpace(m[fieldChoices])
	return len(c) > 2 && c[0] == '['
}

// hintsForProbe maps a failed probe to the diagnosis rows.
func hintsForProbe(r probeResult) []Hint {
	switch {
	case r.err != nil && errors.Is(r.err, context.DeadlineExceeded), r.err != nil && strings.Contains(r.err.Error(), "Timeout"):
		return []Hint{HintClientHangs}
	case r.errCode == "no_healthy_backend", r.errCode == "backend_unreachable":
		return []Hint{HintClientHangs, HintBreaker}
	case r.errCode == "upstream_timeout":
		return []Hint{HintClientHangs}
	case r.status >= 500:
		return []Hint{HintClientHangs, HintBreaker}
	}
	return []Hint{HintClientHangs}
}

// endpointCheck asks one engine directly whether it is ready: /v1/models
// (also names the served model), else the probe path or /health. refused
// says the engine refused the connection: nothing listens there, which no
// setting of the gateway fixes (engine not running, or the rule names the
// wrong IP:port).
func (w *workflow) endpointCheck(ctx context.Context, addr, probePath string) (evidence string, models modelCards, ok, refused bool) {
	start := time.Now()
	get := func(path string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.engineScheme+"://"+addr+path, nil)
		if err != nil {
			return 0, nil, err
		}
		resp, err := w.hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
		return resp.StatusCode, b, err
	}
	code, body, err := get(pathModels)
	if err == nil && code == http.StatusOK {
		var list struct {
			Data []map[string]any `json:"data"`
		}
		if json.Unmarshal(body, &list) == nil {
			for _, m := range list.Data {
				if id, _ := m[fieldID].(string); id != "" {
					n, _ := m[fieldMaxModelLen].(float64)
					models = append(models, modelCard{id: id, maxLen: int(n)})
				}
			}
		}
		names := make([]string, 0, len(models))
		for _, m := range models {
			if m.maxLen > 0 {
				names = append(names, fmt.Sprintf("%s (max_model_len %d)", m.id, m.maxLen))
			} else {
				names = append(names, m.id)
			}
		}
		return fmt.Sprintf("%s %d in %s, models %v", pathModels, code, time.Since(start).Round(time.Millisecond), names), models, true, false
	}
	if err != nil {
		return fmt.Sprintf("unreachable: %v", err), nil, false, isConnRefused(err)
	}
	path := pathHealth
	if probePath != "" {
		path = probePath
	}
	code, _, err = get(path)
	if err != nil {
		return fmt.Sprintf("unreachable: %v", err), nil, false, isConnRefused(err)
	}
	return fmt.Sprintf("%s %d in %s", path, code, time.Since(start).Round(time.Millisecond)), nil, code == http.StatusOK, false
}

// isConnRefused reports whether err is the peer refusing the TCP connection
// (ECONNREFUSED): nothing listens on the address.
func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// schemesOf maps a rule's security to the schemes of its VIP and engines.
func schemesOf(security int) (vip, engine string) {
	switch security {
	case 1:
		return "https", "http"
	case 2:
		return "https", "https"
	}
	return "http", "http"
}
