package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/spec"
)

// TestReadResponse checks the engine response parser against what
// http.ReadResponse would frame: status, headers, body bytes, keep-alive and
// where the next response starts on the same connection.
func TestReadResponse(t *testing.T) {
	const next = "HTTP/1.1 204 No Content\r\n\r\n"
	for _, tc := range []struct {
		name, raw, method string
		code              int
		header            http.Header // subset that must match
		body              string
		close             bool
		bodyErr, headErr  error
	}{
		{name: "length", raw: "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 2\r\nX-Odd-name:  v \r\n\r\n{}" + next,
			code: 200, header: http.Header{"Content-Type": {"application/json"}, "Content-Length": {"2"}, "X-Odd-Name": {"v"}}, body: "{}"},
		{name: "chunked with trailer", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n5\r\ndata:\r\n3\r\n x\n\r\n0\r\nX-T: 1\r\n\r\n" + next,
			code: 200, header: http.Header{"Content-Type": {"text/event-stream"}}, body: "data: x\n"},
		{name: "no reason phrase", raw: "HTTP/1.1 503\r\nContent-Length: 0\r\n\r\n" + next, code: 503},
		{name: "connection close", raw: "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 1\r\n\r\nx", code: 200, body: "x", close: true},
		{name: "until EOF", raw: "HTTP/1.1 200 OK\r\n\r\nrest of stream", code: 200, body: "rest of stream", close: true},
		{name: "http/1.0", raw: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", code: 200, body: "x", close: true},
		{name: "HEAD has no body", method: http.MethodHead, raw: "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n" + next, code: 200},
		{name: "304 has no body", raw: "HTTP/1.1 304 Not Modified\r\n\r\n" + next, code: 304},
		{name: "truncated length", raw: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", code: 200, body: "ab", bodyErr: io.ErrUnexpectedEOF},
		{name: "truncated chunked", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", code: 200, body: "ab", bodyErr: io.ErrUnexpectedEOF},
		{name: "bad status", raw: "HTTP/1.1 2x0 OK\r\n\r\n", headErr: errBadResponse},
		{name: "bad header", raw: "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", headErr: errBadResponse},
		{name: "conflicting length", raw: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", headErr: errBadResponse},
		{name: "gzip transfer coding", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", headErr: errBadResponse},
		{name: "head cut", raw: "HTTP/1.1 200 OK\r\nContent-", headErr: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tc.raw))
			method := cmpOr(tc.method, http.MethodPost)
			resp, body, err := readResponse(br, method, nil)
			if tc.headErr != nil || err != nil {
				if !errors.Is(err, tc.headErr) {
					t.Fatalf("head error %v, want %v", err, tc.headErr)
				}
				return
			}
			if resp.StatusCode != tc.code || resp.Close != tc.close {
				t.Fatalf("status %d close %v, want %d %v", resp.StatusCode, resp.Close, tc.code, tc.close)
			}
			for k, v := range tc.header {
				if got := resp.Header[k]; strings.Join(got, "|") != strings.Join(v, "|") {
					t.Errorf("header %s = %q, want %q (all: %v)", k, got, v, resp.Header)
				}
			}
			if _, ok := resp.Header[headerTE]; ok {
				t.Errorf("Transfer-Encoding left in the header")
			}
			got, err := io.ReadAll(body)
			if string(got) != tc.body || !errors.Is(err, tc.bodyErr) {
				t.Fatalf("body %q err %v, want %q %v", got, err, tc.body, tc.bodyErr)
			}
			if tc.close || tc.bodyErr != nil {
				return
			}
			// The connection must sit exactly at the next response.
			r2, _, err := readResponse(br, method, nil)
			if err != nil || r2.StatusCode != http.StatusNoContent {
				t.Fatalf("next response: %v %v", r2, err)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// BenchmarkReadResponse is the engine response head parse alone, against
// http.ReadResponse on the same bytes (report the ratio).
func BenchmarkReadResponse(b *testing.B) {
	const raw = "HTTP/1.1 200 OK\r\ndate: Sun, 29 Nov 2026 14:00:00 GMT\r\nserver: uvicorn\r\ncontent-length: 2\r\ncontent-type: application/json\r\nx-request-id: 0123456789abcdef0123456789abcdef\r\n\r\n{}"
	// The fake engine's answer head, as the bench scripts' daemon reads
	// it (net/http's canonical names, one that is not interned).
	const fake = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\nX-Fake-Engine: fake\r\nX-Request-Id: 0123456789abcdef0123456789abcdef\r\nDate: Fri, 04 Dec 2026 03:28:57 GMT\r\n\r\n{}"
	req := &http.Request{Method: http.MethodPost}
	sr := strings.NewReader(raw)
	br := bufio.NewReader(sr)
	into, rid := http.Header{}, []string{"client-id"}
	// fields reads as the lean proxy reads (Leg.Fields, into the
	// client's map unless the head needs it).
	fields := func() (io.Reader, error) {
		clear(into)
		into[headerRequestID] = rid
		return readResponseFields(new(response), br, req.Method, into)
	}
	for _, tc := range []struct {
		name, raw string
		read      func() (io.Reader, error)
	}{
		{"net/http", raw, func() (io.Reader, error) { r, err := http.ReadResponse(br, req); return r.Body, err }},
		{"infergate", raw, func() (io.Reader, error) { _, body, err := readResponse(br, req.Method, nil); return body, err }},
		// Into the client's header map (Leg.Into), emptied between
		// requests as the front end empties it.
		{"infergate into", raw, func() (io.Reader, error) {
			clear(into)
			into[headerRequestID] = rid
			_, body, err := readResponse(br, req.Method, into)
			return body, err
		}},
		{"infergate fields", raw, fields},
		{"infergate fields fake", fake, fields},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sr.Reset(tc.raw)
				br.Reset(sr)
				body, err := tc.read()
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSendInto: engine headers parsed into the client's header map
// leave nothing of an interim 1xx response, and a failed exchange puts the
// map back to just the request id (the gateway error is then answered on
// it).
func TestSendInto(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      http.Header // nil: Send must fail
	}{
		{"interim then final", "HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Engine: e\r\n\r\nok",
			http.Header{headerRequestID: {"rid"}, "Content-Length": {"2"}, "X-Engine": {"e"}}},
		{"engine request id is dropped", "HTTP/1.1 200 OK\r\nX-Request-Id: other\r\nContent-Length: 0\r\nVary: a\r\nvary: b\r\n\r\n",
			http.Header{headerRequestID: {"rid"}, "Content-Length": {"0"}, "Vary": {"a", "b"}}},
		{"bad head after some headers", "HTTP/1.1 200 OK\r\nX-Engine: e\r\nbad line\r\n\r\n", nil},
		{"cut mid-head", "HTTP/1.1 200 OK\r\nX-Engine: e\r\n", nil},
		{"closed without an answer", "", nil},
		{"names without a bit, one repeated", "HTTP/1.1 200 OK\r\nX-Engine: e\r\nX-Other: o\r\nx-engine: f\r\nContent-Length: 2\r\n\r\nok",
			http.Header{headerRequestID: {"rid"}, "Content-Length": {"2"}, "X-Engine": {"e", "f"}, "X-Other": {"o"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				_, _ = io.WriteString(c, tc.raw)
			}()
			u := New(time.Second, 4, nil)
			defer u.CloseIdle()
			into := http.Header{headerRequestID: {"rid"}}
			leg := Leg{Endpoint: endpoint(l.Addr().String()), Path: "/v1/completions", Header: http.Header{}, Body: []byte("{}"), HeaderWait: 5 * time.Second, Into: into}
			resp, err := u.Send(t.Context(), leg)
			if tc.want == nil {
				if err == nil {
					resp.Body.Close()
					t.Fatal("Send succeeded on a broken response")
				}
				if !strings.Contains(err.Error(), "reading response from") {
					t.Fatalf("error %q, want a reading error", err)
				}
				tc.want = http.Header{headerRequestID: {"rid"}}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if !reflect.DeepEqual(into, tc.want) {
				t.Fatalf("client header %v, want %v", into, tc.want)
			}
			<-done
		})
	}
}

func TestValidHeaderKey(t *testing.T) {
	for _, tc := range []struct {
		k  string
		ok bool
	}{
		{"Content-Type", true}, {"x-odd_name!#$%&'*+.^`|~09", true}, {"", false},
		{"a b", false}, {"a:b", false}, {"a\tb", false}, {"a(b", false}, {"a\"b", false},
		{"a\\b", false}, {"a{b", false}, {"a\x7fb", false}, {"a\x80b", false},
	} {
		if got := validHeaderKey(tc.k); got != tc.ok {
			t.Errorf("validHeaderKey(%q) = %v, want %v", tc.k, got, tc.ok)
		}
	}
}

func TestTokenCanonical(t *testing.T) {
	for _, tc := range []struct {
		k                string
		valid, canonical bool
	}{
		{"X-Fake-Engine", true, true}, {"Content-Type", true, true}, {"H1", true, true},
		{"X-Fake-engine", true, false}, {"x-fake-engine", true, false}, {"X-FAKE", true, false},
		{"X--A", true, true}, {"-A", true, true}, {"-a", true, false}, {"A-", true, true},
		{"X_odd", true, true}, {"X_Odd", true, false}, {"1a", true, true}, {"1A", true, false},
		{"", false, true}, {"a b", false, false}, {"A:", false, false}, {"A\x80", false, false},
	} {
		valid, canonical := tokenCanonical(tc.k)
		if valid != tc.valid || valid && canonical != tc.canonical {
			t.Errorf("tokenCanonical(%q) = %v, %v; want %v, %v", tc.k, valid, canonical, tc.valid, tc.canonical)
		}
		if valid != validHeaderKey(tc.k) {
			t.Errorf("tokenCanonical(%q) valid %v, validHeaderKey says otherwise", tc.k, valid)
		}
		if valid && canonical != (textproto.CanonicalMIMEHeaderKey(tc.k) == tc.k) {
			t.Errorf("tokenCanonical(%q) canonical %v, CanonicalMIMEHeaderKey gives %q", tc.k, canonical, textproto.CanonicalMIMEHeaderKey(tc.k))
		}
	}
}

func endpoint(addr string) spec.Endpoint {
	ap := netip.MustParseAddrPort(addr)
	return spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1}
}

// deadEndpoint is an address on which nothing listens.
func deadEndpoint(t *testing.T) spec.Endpoint {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return endpoint(addr)
}

const completionBody = `{"model":"fake-model","prompt":"hello","max_tokens":4}`

// TestSendDialErrorNotSent: a connect failure is a *DialError, the one
// error that says the engine never saw the request.
func TestSendDialErrorNotSent(t *testing.T) {
	var s Sender = New(time.Second, 4, nil)
	_, err := s.Send(context.Background(), Leg{Endpoint: deadEndpoint(t), Path: "/v1/completions"})
	var de *DialError
	if !errors.As(err, &de) || !de.NotSent() || !NotSent(err) {
		t.Fatalf("err = %v, want *DialError with NotSent", err)
	}
	if NotSent(fmt.Errorf("reading response: %w", io.ErrUnexpectedEOF)) {
		t.Fatal("NotSent true for an error after sending")
	}
}

// TestSendLeg: legs reuse a pooled connection and reach the engine with
// their body and request id intact.
func TestSendLeg(t *testing.T) {
	e, err := fakeengine.Start(fakeengine.Options{Name: "leg"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := New(time.Second, 4, nil)
	defer c.CloseIdle()
	var s Sender = c
	h := http.Header{}
	h.Set(headerRequestID, "leg-1")
	for k := range 3 { // the second and third reuse the pooled connection
		resp, err := s.Send(context.Background(), Leg{Endpoint: endpoint(e.Addr()), Method: http.MethodPost, Path: "/v1/completions", Header: h, Body: []byte(completionBody)})
		if err != nil {
			t.Fatalf("leg %d: %v", k, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "tok0") {
			t.Fatalf("leg %d: %d %s", k, resp.StatusCode, b)
		}
	}
	reqs := e.Requests()
	if len(reqs) != 3 || string(reqs[2].Body) != completionBody || reqs[2].RequestID != "leg-1" {
		t.Fatalf("engine saw %+v", reqs)
	}
	_, err = s.Send(context.Background(), Leg{Endpoint: deadEndpoint(t), Method: http.MethodPost, Path: "/v1/completions"})
	var de *DialError
	if !errors.As(err, &de) || !de.NotSent() {
		t.Fatalf("dead endpoint: %v, want *DialError", err)
	}
}

// TestSendRequestBytes: the request reaches the engine the same whether
// its line and its tail (Content-Length, body) were appended at once or,
// not fitting the buffer, written piece by piece.
func TestSendRequestBytes(t *testing.T) {
	long := strings.Repeat("p", bufSize+10)
	for _, tc := range []struct {
		name, method, path string
		body               []byte
	}{
		{"small POST", http.MethodPost, "/v1/completions", []byte(`{"prompt":"x"}`)},
		{"GET without a body", http.MethodGet, "/v1/models", nil},
		{"POST with an empty body", http.MethodPost, "/v1/completions", []byte{}},
		{"body past the buffer", http.MethodPost, "/v1/completions", bytes.Repeat([]byte("b"), bufSize+7)},
		{"body that fills the buffer's rest", http.MethodPost, "/v1/completions", bytes.Repeat([]byte("b"), bufSize-200)},
		{"target past the buffer", http.MethodPost, "/" + long, []byte("{}")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			type seen struct {
				req  *http.Request
				body []byte
				err  error
			}
			got := make(chan seen, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					got <- seen{err: err}
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				req, err := http.ReadRequest(bufio.NewReaderSize(c, 2*bufSize+100))
				var s seen
				if s.req, s.err = req, err; err == nil {
					s.body, s.err = io.ReadAll(req.Body)
				}
				got <- s
				_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
			}()
			u := New(time.Second, 4, nil)
			defer u.CloseIdle()
			h := http.Header{"X-A": {"1"}, headerRequestID: {"rid"}}
			resp, err := u.Send(t.Context(), Leg{Endpoint: endpoint(l.Addr().String()), Method: tc.method, Path: tc.path, Header: h, Body: tc.body, HeaderWait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			s := <-got
			if s.err != nil {
				t.Fatal(s.err)
			}
			r := s.req
			wantCL := int64(len(tc.body))
			if r.Method != tc.method || r.RequestURI != tc.path || r.Host != l.Addr().String() ||
				r.Header.Get("X-A") != "1" || r.Header.Get(headerRequestID) != "rid" ||
				r.ContentLength != wantCL || !bytes.Equal(s.body, tc.body) && len(tc.body)+len(s.body) > 0 {
				t.Fatalf("engine saw %s %.40q host %q header %v length %d body %d bytes", r.Method, r.RequestURI, r.Host, r.Header, r.ContentLength, len(s.body))
			}
		})
	}
}
