package enginestats

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseMaxModelLen(t *testing.T) {
	tests := []struct {
		name, body, model string
		want              int
		ok                bool
	}{
		{"vLLM card", `{"object":"list","data":[{"id":"m","object":"model","max_model_len":8192}]}`, "m", 8192, true},
		{"model not listed: smallest", `{"data":[{"id":"a","max_model_len":8192},{"id":"b","max_model_len":4096}]}`, "c", 4096, true},
		{"named model wins", `{"data":[{"id":"a","max_model_len":2048},{"id":"b","max_model_len":4096}]}`, "b", 4096, true},
		{"no model: smallest", `{"data":[{"id":"a","max_model_len":8192},{"id":"lora","max_model_len":4096}]}`, "", 4096, true},
		{"no window (TRT-LLM)", `{"data":[{"id":"m","object":"model"}]}`, "m", 0, false},
		{"string", `{"data":[{"id":"m","max_model_len":"8192"}]}`, "m", 0, false},
		{"fraction", `{"data":[{"id":"m","max_model_len":8192.5}]}`, "m", 0, false},
		{"zero", `{"data":[{"id":"m","max_model_len":0}]}`, "m", 0, false},
		{"negative", `{"data":[{"id":"m","max_model_len":-1}]}`, "m", 0, false},
		{"absurd", `{"data":[{"id":"m","max_model_len":1e12}]}`, "m", 0, false},
		{"absurd named, sane other", `{"data":[{"id":"m","max_model_len":99999999999},{"id":"x","max_model_len":1024}]}`, "m", 1024, true},
		{"not JSON", `<html>`, "m", 0, false},
		{"data not a list", `{"data":{}}`, "m", 0, false},
	}
	for _, tc := range tests {
		got, ok := ParseMaxModelLen([]byte(tc.body), tc.model)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFetchMaxModelLen(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"data":[{"id":"m","max_model_len":4096}]}`)
		case "/big/v1/models":
			fmt.Fprintf(w, `{"data":[{"id":"m","max_model_len":4096,"pad":"%s"}]}`, strings.Repeat("x", maxModelsBody))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	hc := &http.Client{Timeout: 2 * time.Second}
	ctx := context.Background()
	if n, err := FetchMaxModelLen(ctx, hc, srv.URL+"/v1/models", "m"); n != 4096 || err != nil {
		t.Errorf("fetch: %d %v, want 4096", n, err)
	}
	for _, path := range []string{"/missing/v1/models", "/big/v1/models"} {
		if n, err := FetchMaxModelLen(ctx, hc, srv.URL+path, "m"); err == nil {
			t.Errorf("%s: %d, want an error", path, n)
		}
	}
}
