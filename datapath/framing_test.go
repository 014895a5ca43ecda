package datapath

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// recordingEngine answers every request 200 and records what it received,
// as net/http parsed it off its own connection.
type recordingEngine struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // "METHOD path body"
}

func startRecordingEngine(t *testing.T) *recordingEngine {
	t.Helper()
	e := &recordingEngine{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.seen = append(e.seen, r.Method+" "+r.URL.Path+" "+string(b))
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *recordingEngine) requests() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// sendFramed writes raw on a new connection to addr and returns the status
// codes of the responses read before the gateway closed the connection (or
// went quiet for a moment).
func sendFramed(t *testing.T, addr, raw string) []int {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := io.WriteString(nc, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	var codes []int
	for {
		_ = nc.SetReadDeadline(time.Now().Add(700 * time.Millisecond))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return codes
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
}

// TestRequestFraming sends request shapes that smuggle a second request
// past a front end that frames the body differently from the engine, or
// that RFC 9112 says a server must refuse (test/framingdiff sends generated
// shapes to real nginx beside both front ends). Whatever the front end, no
// request reaches the engine that the client did not send as one request
// (the smuggled one targets /smuggled), and every refused shape costs the
// engine nothing. Both front ends refuse every shape marked refuse (nginx
// refuses each of them too): net/http reads its requests through the lean
// parser's framing check (h1.GateListener), since on its own it lets
// Transfer-Encoding win over Content-Length and unfolds obs-fold.
func TestRequestFraming(t *testing.T) {
	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	tests := []struct {
		name   string
		raw    string
		refuse bool // refused (4xx/5xx, nothing forwarded)
	}{
		{"CL and TE", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, true},
		{"TE and CL", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n" + smuggled, true},
		{"duplicate CL differing", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}" + smuggled, true},
		{"duplicate CL equal", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", true},
		{"CL list", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 2\r\n\r\n{}", true},
		{"CL plus sign", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: +2\r\n\r\n{}", true},
		{"CL hex", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0x2\r\n\r\n{}", true},
		{"CL negative", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}", true},
		{"CL overflow", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n{}", true},
		{"TE not chunked", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}", true},
		{"TE chunked last of list", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", true},
		{"TE duplicate", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		{"TE with space before colon", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" + smuggled, true},
		{"TE vertical tab", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\x0bchunked\r\n\r\n0\r\n\r\n" + smuggled, true},
		{"TE in HTTP/1.0", "POST /v1/completions HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		{"obs-fold", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\n{}", true},
		{"obs-fold of TE", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n" + smuggled, true},
		{"bare LF in head", "POST /v1/completions HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}", true},
		{"bare LF in a field", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-A: a\nContent-Length: 2\r\n\r\n{}", true},
		{"bare CR in a field", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-A: a\rContent-Length: 40\r\nContent-Length: 2\r\n\r\n{}", true},
		{"NUL in a field", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\n{}", true},
		{"space in field name", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX A: b\r\nContent-Length: 2\r\n\r\n{}", true},
		{"no colon", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-A\r\nContent-Length: 2\r\n\r\n{}", true},
		{"missing Host", "POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", true},
		{"duplicate Host", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nHost: y\r\nContent-Length: 2\r\n\r\n{}", true},
		{"two spaces in request line", "POST  /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", true},
		{"HTTP/2.0 request line", "POST /v1/completions HTTP/2.0\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", true},
		{"over-long request line", "GET /" + strings.Repeat("a", 70<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"over-long header line", "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", true},
		{"chunk size not hex", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", true},
		{"chunk size bare LF", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n" + smuggled, true},
		{"chunk data overrun", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX\r\n0\r\n\r\n" + smuggled, true},
		{"chunk ext with LF", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2;a\nb\r\n{}\r\n0\r\n\r\n" + smuggled, true},
		{"lower-case method", "post /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", true},
		{"empty Host", "POST /v1/completions HTTP/1.1\r\nHost:\r\nContent-Length: 2\r\n\r\n{}", true},
		{"asterisk-form", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"chunk size overflow", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000002\r\n{}\r\n0\r\n\r\n" + smuggled, true},
		{"chunked good then pipelined", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\nPOST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", false},
	}
	eng := startRecordingEngine(t)
	rt, _ := newTestRuntime(t, testOptions())
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.srv.Listener.Addr().String(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	addr := r.Key.ListenAddr().String()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(eng.requests())
			codes := sendFramed(t, addr, tc.raw)
			got := eng.requests()[before:]
			for _, s := range got {
				if strings.Contains(s, "/smuggled") {
					t.Fatalf("smuggled request reached the engine: %q (all: %q)", s, got)
				}
			}
			if len(got) > len(codes) {
				t.Errorf("engine saw %d requests, client got %d answers: %q", len(got), len(codes), got)
			}
			refused := len(got) == 0 && (len(codes) == 0 || codes[0] >= 400)
			if tc.refuse && !refused {
				t.Errorf("not refused: answers %v, engine saw %q", codes, got)
			}
			if !tc.refuse && (len(codes) != 2 || codes[0] != 200 || codes[1] != 200 || len(got) != 2) {
				t.Errorf("well-framed requests: answers %v, engine saw %q", codes, got)
			}
		})
	}
}
