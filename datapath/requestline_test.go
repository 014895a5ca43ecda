package datapath

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Raw sends one HTTP/2 request with the pseudo-headers exactly as given
// (Go's clients refuse to send a bad :method, which is the point) and
// returns the response status and body.
func h2Raw(t *testing.T, addr string, cfg *tls.Config, method, path, authority string) (int, string) {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN = %q, want h2", p)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, bufio.NewReader(conn))
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: method}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: authority}, {Name: ":path", Value: path},
	} {
		if err := enc.WriteField(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	status := 0
	var body bytes.Buffer
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == ":status" {
			status, _ = strconv.Atoi(f.Value)
		}
	})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v (status so far %d)", err, status)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
				t.Fatal(err)
			}
			if f.StreamEnded() {
				return status, body.String()
			}
		case *http2.DataFrame:
			body.Write(f.Data())
			if f.StreamEnded() {
				return status, body.String()
			}
		case *http2.RSTStreamFrame:
			return -int(f.ErrCode), body.String()
		case *http2.GoAwayFrame:
			return -1000 - int(f.ErrCode), body.String()
		}
	}
}

// TestH2PseudoHeadersCannotWriteARequestLine: a :method that is not a token
// or a :path with whitespace or control bytes is refused (400 with a stable
// code) before routing, never written into the engine's request line.
func TestH2PseudoHeadersCannotWriteARequestLine(t *testing.T) {
	env := newTLSEnv(t)
	eng := startPathRecorder(t)
	port := freePort(t)
	r := tlsRule(port, "", epFor(t, eng.addr(), 1))
	r.Admin.Open = true // the request line check alone must hold
	if err := env.rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: env.ca.Pool(), ServerName: "localhost"}
	addr := r.Key.ListenAddr().String()
	for _, tc := range []struct {
		name, method, path string
		status             int
		code               string
		resetOK            bool // the HTTP/2 layer may refuse it first (RST_STREAM)
	}{
		{"method with a request line", "GET /sleep?", "/v1/models", 400, CodeInvalidMethod, false},
		{"method with a space", "POST ", "/v1/models", 400, CodeInvalidMethod, false},
		{"method with a separator", "GET(", "/v1/models", 400, CodeInvalidMethod, false},
		{"path with a space", "GET", "/v1/models /sleep", 400, CodeInvalidTarget, false},
		{"path with a tab", "GET", "/v1/models\t", 400, CodeInvalidTarget, true},
		{"query with a space", "GET", "/v1/models?a= HTTP/1.1", 400, CodeInvalidTarget, false},
		{"plain", "GET", "/v1/models", 200, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(eng.paths())
			status, body := h2Raw(t, addr, cfg, tc.method, tc.path, "localhost")
			if status < 0 && tc.resetOK {
				if len(eng.paths()) != before {
					t.Fatalf("the engine received %v", eng.paths()[before:])
				}
				return
			}
			if status != tc.status {
				t.Fatalf("status %d %q, want %d", status, body, tc.status)
			}
			if tc.code != "" {
				if got := errorCode(t, body); got != tc.code {
					t.Fatalf("code %q, want %q", got, tc.code)
				}
				if len(eng.paths()) != before {
					t.Fatalf("the engine received %v", eng.paths()[before:])
				}
			}
		})
	}
}

// TestHTTP1BadRequestLineNeverReachesEngine: HTTP/1.1's parser refuses the
// same shapes before the handler; the engine sees nothing.
func TestHTTP1BadRequestLineNeverReachesEngine(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	eng := startPathRecorder(t)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"GET /sleep? /v1/models HTTP/1.1",
		"GE(T /v1/models HTTP/1.1",
		"GET /v1/models\x01 HTTP/1.1",
	} {
		conn, err := net.DialTimeout("tcp", r.Key.ListenAddr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "%s\r\nHost: x\r\n\r\n", line)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: status %d, want 400", line, resp.StatusCode)
		}
	}
	if got := eng.paths(); len(got) != 0 {
		t.Errorf("the engine received %v", got)
	}
}

func TestCheckRequestLine(t *testing.T) {
	for _, tc := range []struct{ method, target, want string }{
		{"GET", "/v1/models", ""},
		{"M-SEARCH", "*", ""},
		{"PATCH", "/a?b=c&d=%20", ""},
		{"", "/", CodeInvalidMethod},
		{"GET /x", "/", CodeInvalidMethod},
		{"GET\r\n", "/", CodeInvalidMethod},
		{"GÉT", "/", CodeInvalidMethod},
		{"GET", "/a b", CodeInvalidTarget},
		{"GET", "/a\x00", CodeInvalidTarget},
		{"GET", "/a\x7f", CodeInvalidTarget},
		// Eight bytes and more: seen a word at a time (swar.go), a bad
		// byte in the first word, in the last (overlapping) one, at the
		// very end, and bytes above 0x7f, which are allowed.
		{"POST", "/v1/completions", ""},
		{"POST", "/v1/chat/completions?x=\x80\xff", ""},
		{"POST", "/v1\tchat/completions", CodeInvalidTarget},
		{"POST", "/v1/chat/completions ", CodeInvalidTarget},
		{"POST", "/v1/chat/completion\x7fs", CodeInvalidTarget},
		{"POST", "/v1/chat/com\x1fpletions", CodeInvalidTarget},
		{"POST", "/12345678", ""},
		{"POST", "/1234567 ", CodeInvalidTarget},
		{"POST", " 12345678", CodeInvalidTarget},
	} {
		got, _ := checkRequestLine(&http.Request{Method: tc.method, RequestURI: tc.target})
		if got != tc.want {
			t.Errorf("checkRequestLine(%q, %q) = %q, want %q", tc.method, tc.target, got, tc.want)
		}
	}
}

// FuzzRequestLineWords holds the word-at-a-time scans (swar.go) to the
// byte loops they stand for.
func FuzzRequestLineWords(f *testing.F) {
	for _, s := range []string{"/v1/completions", "/v1/models/../x", "/a\\b", "/12345678\x7f", "/\x00", "", "/a.b", "/\x80\xff.12345678"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		plain, may := true, false
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c <= ' ' || c == 0x7f {
				plain = false
			}
			if c < 0x20 || c == 0x7f || c == '\\' || c == '.' {
				may = true
			}
		}
		if got := targetPlain(s); got != plain {
			t.Fatalf("targetPlain(%q) = %v, want %v", s, got, plain)
		}
		if got := pathMayRefuse(s); got != may {
			t.Fatalf("pathMayRefuse(%q) = %v, want %v", s, got, may)
		}
	})
}
