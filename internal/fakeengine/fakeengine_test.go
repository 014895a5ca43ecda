package fakeengine

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestFakeEngine(t *testing.T) {
	s, err := Start(Options{Name: "t", Tokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + s.Addr()
	call := func(method, path, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set(HeaderRequestID, "rid-1")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	tests := []struct {
		name, method, path, body string
		status                   int
		contains                 []string
	}{
		{"completion", "POST", PathCompletions, `{"prompt":"x"}`, 200, []string{`"text":"tok0 tok1 tok2 "`, `"completion_tokens":3`}},
		{"chat", "POST", PathChatCompletions, `{"messages":[]}`, 200, []string{`"content":"tok0 tok1 tok2 "`}},
		{"stream", "POST", PathCompletions, `{"stream":true}`, 200, []string{"data: {", `"text":"tok2 "`, "data: [DONE]\n\n"}},
		{"models", "GET", PathModels, "", 200, []string{`"id":"fake-model"`}},
		{"health", "GET", PathHealth, "", 200, []string{"ok"}},
		{"bad json", "POST", PathCompletions, `{`, 400, []string{"invalid JSON"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, h, body := call(tc.method, tc.path, tc.body)
			if st != tc.status || h.Get(HeaderEngine) != "t" || h.Get(HeaderRequestID) != "rid-1" {
				t.Fatalf("status %d engine %q id %q", st, h.Get(HeaderEngine), h.Get(HeaderRequestID))
			}
			for _, want := range tc.contains {
				if !strings.Contains(body, want) {
					t.Fatalf("body %q lacks %q", body, want)
				}
			}
		})
	}
	if got := s.Requests(); len(got) != 4 || !got[2].Stream || got[2].RequestID != "rid-1" {
		t.Fatalf("request log = %+v", got)
	}
	s.SetStatus(503)
	if st, _, _ := call("POST", PathCompletions, `{}`); st != 503 {
		t.Fatalf("forced status: %d", st)
	}
	s.SetStatus(0)
	s.SetDrop(true)
	req, _ := http.NewRequest("POST", base+PathCompletions, strings.NewReader(`{}`))
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("dropped connection produced a response")
	}
}
