package datapath

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/h1"
)

// requestLineSeeds are request lines' method and target, each one that
// checkRequestLine refuses (the first group) or accepts (the second).
var requestLineSeeds = []struct{ method, target string }{
	{"GET\x00", "/"}, {"G(T", "/"}, {"GET/", "/"}, {"G\"T", "/"}, {"G@T", "/"}, {"GÉT", "/"},
	{"GET\x7f", "/"}, {"GET\t", "/"}, {"GE T", "/"}, {"", "/"},
	{"GET", "/a\x00b"}, {"GET", "/a\tb"}, {"GET", "/a\x7fb"}, {"GET", "/a\x01b/c/d/e/f/g"},
	{"GET", "/a/b/c/d/e/f/g\x7f"}, {"GET", "/a\vb"}, {"GET", "/\x1f"}, {"GET", "/a b"},
	{"POST", "/v1/completions"}, {"post", "/v1/completions"}, {"M-SEARCH", "*"},
	{"GET", "/v1/models?x=é"}, {"CONNECT", "example.com:443"}, {"GET", "http://x/y"},
}

// FuzzRequestLineH1 drives h1's parser with request lines and asserts
// that every request it hands a handler passes checkRequestLine: h1
// refuses all that checkRequestLine refuses, so the handler may skip the
// check for requests h1 marks line-checked (h1.Arrival.LineChecked).
func FuzzRequestLineH1(f *testing.F) {
	for _, s := range requestLineSeeds {
		f.Add(s.method, s.target)
	}
	var mu sync.Mutex
	var bad []string
	s := &h1.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if code, msg := checkRequestLine(r); code != "" {
				mu.Lock()
				bad = append(bad, r.Method+" "+r.RequestURI+": "+msg)
				mu.Unlock()
			}
		}),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       5 * time.Second,
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go func() { _ = s.Serve(l) }()
	f.Cleanup(func() { _ = s.Close() })
	f.Fuzz(func(t *testing.T, method, target string) {
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Write([]byte(method + " " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")); err != nil {
			return // refused and closed already
		}
		if resp, err := http.ReadResponse(bufio.NewReader(nc), nil); err == nil {
			resp.Body.Close()
		}
		mu.Lock()
		defer mu.Unlock()
		for _, b := range bad {
			t.Errorf("h1 served a request checkRequestLine refuses: %q", b)
		}
		bad = bad[:0]
	})
}

// TestRequestLineSeeds: the seeds hold what they say, so the fuzz target's
// corpus covers each of checkRequestLine's refusals.
func TestRequestLineSeeds(t *testing.T) {
	for i, s := range requestLineSeeds {
		code, _ := checkRequestLine(&http.Request{Method: s.method, RequestURI: s.target})
		if refused := code != ""; refused != (i < 18) {
			t.Errorf("%q %q: refused %v, want %v", s.method, s.target, refused, i < 18)
		}
	}
}
