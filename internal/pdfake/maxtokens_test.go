package pdfake

import (
	"bufio"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sseEvent is one parsed SSE event.
type sseEvent struct {
	name string
	data map[string]any
}

func parseSSE(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			d := strings.TrimPrefix(line, "data: ")
			if d != "[DONE]" {
				if err := json.Unmarshal([]byte(d), &cur.data); err != nil {
					t.Fatalf("event data %q: %v", d, err)
				}
			}
		case line == "":
			if cur.name != "" || cur.data != nil {
				out = append(out, cur)
			}
			cur = sseEvent{}
		}
	}
	return out
}

// TestMessagesStreamIsComplete: /v1/messages streams the whole event
// sequence the Anthropic SDKs accumulate (their messages.stream() throws on
// a message_start without usage or a missing content_block_start/stop).
func TestMessagesStreamIsComplete(t *testing.T) {
	e := startT(t, DefaultConfig(VLLM, Decode))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, body, err := post(t, ctx, e, pathMessages, `{"model":"fake-model","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if err != nil || code != 200 {
		t.Fatalf("%d %v %s", code, err, body)
	}
	evs := parseSSE(t, body)
	var names []string
	for _, ev := range evs {
		names = append(names, ev.name)
		if ev.data["type"] != ev.name {
			t.Errorf("event %s carries type %v", ev.name, ev.data["type"])
		}
	}
	want := []string{"message_start", "content_block_start"}
	for range 5 { // StreamChunks
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("events %v\nwant   %v", names, want)
	}
	msg, _ := evs[0].data["message"].(map[string]any)
	usage, _ := msg["usage"].(map[string]any)
	if msg["role"] != "assistant" || msg["stop_reason"] != nil || usage == nil || usage["output_tokens"] != float64(0) {
		t.Errorf("message_start.message = %v", msg)
	}
	delta, _ := evs[len(evs)-2].data["delta"].(map[string]any)
	if delta["stop_reason"] != stopReasonEndTurn {
		t.Errorf("message_delta = %v", evs[len(evs)-2].data)
	}
}

// TestHonorMaxTokens: with HonorMaxTokens the fake stops at the client's
// token limit on every generation API, saying so in the finish reason.
func TestHonorMaxTokens(t *testing.T) {
	tests := []struct {
		name, path, body string
		honor            bool
		want             string // in the body
		events           int    // token events when streaming (0: not streamed)
	}{
		{"completion capped", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":3}`, true,
			`"text":"Hello from the"`, 0},
		{"completion capped reason", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":3}`, true,
			`"finish_reason":"length"`, 0},
		{"completion under the limit", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":100}`, true,
			`"finish_reason":"stop"`, 0},
		{"chat max_completion_tokens", "/v1/chat/completions", `{"model":"m","messages":[],"max_completion_tokens":2}`, true,
			`"content":"Hello from"`, 0},
		{"completion stream capped", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":2,"stream":true}`, true,
			`"finish_reason":"length"`, 2},
		{"messages stream capped", pathMessages, `{"model":"m","max_tokens":2,"stream":true,"messages":[]}`, true,
			`"stop_reason":"max_tokens"`, 2},
		{"messages capped", pathMessages, `{"model":"m","max_tokens":2,"messages":[]}`, true,
			`"text":"Hello from"`, 0},
		{"responses capped", pathResponses, `{"model":"m","input":"hi","max_output_tokens":1}`, true,
			`"text":"Hello"`, 0},
		{"off by default", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":2,"stream":true}`, false,
			`"finish_reason":"stop"`, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(VLLM, Decode)
			cfg.HonorMaxTokens = tc.honor
			e := startT(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			code, body, err := post(t, ctx, e, tc.path, tc.body)
			if err != nil || code != 200 || !strings.Contains(body, tc.want) {
				t.Fatalf("%d %v: body %s lacks %s", code, err, body, tc.want)
			}
			if tc.events == 0 {
				return
			}
			n := 0
			for _, ev := range parseSSE(t, body) {
				if ev.name == "content_block_delta" {
					n++
				}
				if ch, _ := ev.data["choices"].([]any); len(ch) == 1 && ch[0].(map[string]any)["finish_reason"] == nil {
					n++
				}
			}
			if n != tc.events {
				t.Fatalf("%d token events, want %d:\n%s", n, tc.events, body)
			}
		})
	}
}
