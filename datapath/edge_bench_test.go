package datapath

import (
	"bytes"
	"net/http"
	"net/url"
	"testing"

	"github.com/infergate/infergate/datapath/hop"
)

// BenchmarkEdgeChecks is the per-request cost the edge checks add to the hot
// path, piece by piece: the path shape check, the hop-by-hop strip of an
// engine response header, and reading a small body through the budgeted
// reader (compare with the plain make+read it replaced).
func BenchmarkEdgeChecks(b *testing.B) {
	r := &http.Request{URL: &url.URL{Path: "/v1/chat/completions"}}
	b.Run("path_shape", func(b *testing.B) {
		for b.Loop() {
			if code, _ := checkPathShape(r); code != "" {
				b.Fatal(code)
			}
		}
	})
	b.Run("hop_strip", func(b *testing.B) {
		h := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"120"}, "Date": {"x"}, "Connection": {"keep-alive"}}
		for b.Loop() {
			h["Connection"] = []string{"keep-alive"}
			hop.Strip(h)
		}
	})
	b.Run("hop_plain_before", func(b *testing.B) {
		h := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"120"}, "Date": {"x"}, "Connection": {"keep-alive"}}
		for b.Loop() {
			h["Connection"] = []string{"keep-alive"}
			for _, k := range hop.Headers {
				delete(h, k)
			}
		}
	})
	body := []byte(completionBody)
	b.Run("body_budgeted", func(b *testing.B) {
		rt := New(DefaultOptions(), nil, nil)
		b.ReportAllocs()
		for b.Loop() {
			rb, err := rt.bodies.Read(bytes.NewReader(body), int64(len(body)), 32<<20)
			if err != nil {
				b.Fatal(err)
			}
			rb.Release()
		}
	})
	b.Run("body_plain_before", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf := make([]byte, len(body))
			if _, err := bytes.NewReader(body).Read(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
