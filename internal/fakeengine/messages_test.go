package fakeengine

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMessagesStreamStart: message_start carries what the Anthropic SDKs'
// accumulators update later (usage, null stop fields); without usage
// messages.stream() throws at message_delta.
func TestMessagesStreamStart(t *testing.T) {
	s, err := Start(Options{Name: "t", Tokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post("http://"+s.Addr()+PathMessages, "application/json", strings.NewReader(`{"model":"m","max_tokens":8,"stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	first, _, _ := strings.Cut(strings.SplitN(string(b), "data: ", 2)[1], "\n")
	var ev struct {
		Type    string         `json:"type"`
		Message map[string]any `json:"message"`
	}
	if err := json.Unmarshal([]byte(first), &ev); err != nil || ev.Type != "message_start" {
		t.Fatalf("first event %q: %v", first, err)
	}
	usage, _ := ev.Message["usage"].(map[string]any)
	stop, hasStop := ev.Message["stop_reason"]
	if usage == nil || usage["output_tokens"] != float64(0) || !hasStop || stop != nil {
		t.Fatalf("message_start.message = %v", ev.Message)
	}
}
