package hop

import (
	"net/http"
	"reflect"
	"testing"
)

func TestStrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want http.Header
	}{
		{"standard set", http.Header{"Connection": {"close"}, "Keep-Alive": {"timeout=5"}, "Te": {"trailers"}, "Upgrade": {"h2c"}, "X-A": {"1"}},
			http.Header{"X-A": {"1"}}},
		{"named in Connection", http.Header{"Connection": {"keep-alive, X-Secret-Hop"}, "X-Secret-Hop": {"s"}, "X-A": {"1"}},
			http.Header{"X-A": {"1"}}},
		{"lower-case name, several values", http.Header{"Connection": {"x-one", " X-Two ,"}, "X-One": {"1"}, "X-Two": {"2"}, "X-Three": {"3"}},
			http.Header{"X-Three": {"3"}}},
		{"no Connection", http.Header{"Content-Type": {"application/json"}}, http.Header{"Content-Type": {"application/json"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Strip(tc.in)
			if !reflect.DeepEqual(tc.in, tc.want) {
				t.Fatalf("got %v, want %v", tc.in, tc.want)
			}
		})
	}
}

func BenchmarkStrip(b *testing.B) {
	for b.Loop() {
		h := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"120"}, "Connection": {"keep-alive"}}
		Strip(h)
	}
}

// TestIsHeader keeps IsHeader's switch and the Headers list the same set.
func TestIsHeader(t *testing.T) {
	for _, k := range Headers {
		if !IsHeader(k) {
			t.Errorf("IsHeader(%q) = false for a listed header", k)
		}
	}
	for _, k := range []string{"Content-Type", "X-Request-Id", "connection", "Te2", ""} {
		if IsHeader(k) {
			t.Errorf("IsHeader(%q) = true for an end-to-end field", k)
		}
	}
}
