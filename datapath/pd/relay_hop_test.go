package pd

import (
	"net/http"
	"reflect"
	"testing"
)

// TestCopyResponseHeaderStripsConnectionNamed: a field the engine names in
// Connection is hop-scoped and never reaches the client.
func TestCopyResponseHeaderStripsConnectionNamed(t *testing.T) {
	src := http.Header{
		"Connection":   {"keep-alive, X-Secret-Hop"},
		"X-Secret-Hop": {"s3cret"},
		"Keep-Alive":   {"timeout=5"},
		"Content-Type": {"text/event-stream"},
	}
	dst := http.Header{"X-Request-Id": {"client-id"}}
	copyResponseHeader(dst, src)
	want := http.Header{"X-Request-Id": {"client-id"}, "Content-Type": {"text/event-stream"}}
	if !reflect.DeepEqual(dst, want) {
		t.Fatalf("copied %v, want %v", dst, want)
	}
	h := legHeader(http.Header{"Connection": {"X-Client-Hop"}, "X-Client-Hop": {"v"}, "Authorization": {"Bearer x"}})
	if h.Get("X-Client-Hop") != "" || h.Get("Authorization") == "" {
		t.Fatalf("leg header %v", h)
	}
}
