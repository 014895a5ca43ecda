package datapath

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/spec"
)

// TestPairsFit: the relay's read of an engine head's pairs: the first
// Content-Type, and whether a field the datapath reads back from the
// client's header map (the gateway's error code) sends them into it.
func TestPairsFit(t *testing.T) {
	tests := []struct {
		name   string
		kv     []string
		ct     string
		fit    bool
		wantIn http.Header // the map after pairsIntoMap
	}{
		{"none", []string{}, "", true, http.Header{}},
		{"type", []string{"Date", "d", "Content-Type", "text/event-stream"}, "text/event-stream", true,
			http.Header{"Date": {"d"}, "Content-Type": {"text/event-stream"}}},
		{"first type", []string{"Content-Type", "a", "Content-Type", "b"}, "a", true, http.Header{"Content-Type": {"a", "b"}}},
		{"error code", []string{"Content-Type", "a", HeaderError, "engine"}, "", false,
			http.Header{"Content-Type": {"a"}, HeaderError: {"engine"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ct, fit := pairsFit(tc.kv)
			if fit && ct != tc.ct || fit != tc.fit {
				t.Errorf("pairsFit = %q, %v; want %q, %v", ct, fit, tc.ct, tc.fit)
			}
			h := http.Header{}
			pairsIntoMap(h, tc.kv)
			if !equalHeader(h, tc.wantIn) {
				t.Errorf("pairsIntoMap: %v, want %v", h, tc.wantIn)
			}
		})
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestRelayedHeads: engine heads relayed by the lean front end, whose
// writer takes the engine's fields as pairs, reach the client as the map
// relayed them: names as the map's keys, a name's values in their order,
// the engine's id replaced by the client's, the gateway's error field
// kept, an invalid length never sent, values scrubbed; both front ends.
func TestRelayedHeads(t *testing.T) {
	tests := []struct {
		name, status, fields, body string
		want                       []string // field lines the client must get, in this order where a name repeats
		absent                     []string // lower-case line starts it must not get
	}{
		{name: "fake engine", status: "200 OK", body: "{}",
			fields: "Content-Length: 2\r\nContent-Type: application/json\r\nX-Fake-Engine: f\r\nDate: engine's\r\n",
			want:   []string{"Content-Length: 2", "Content-Type: application/json", "X-Fake-Engine: f", "Date: engine's", "X-Request-Id: rid-1"}},
		{name: "lower case", status: "200 OK", body: "{}",
			fields: "content-length: 2\r\ncontent-type: application/json\r\nx-custom: c\r\nserver: uvicorn\r\n",
			want:   []string{"Content-Length: 2", "Content-Type: application/json", "X-Custom: c", "Server: uvicorn"}},
		{name: "engine's id", status: "200 OK", body: "{}",
			fields: "Content-Length: 2\r\nx-request-id: engine\r\n",
			want:   []string{"X-Request-Id: rid-1"}, absent: []string{"x-request-id: engine"}},
		{name: "repeated", status: "200 OK", body: "{}",
			fields: "X-Two: a\r\nX-One: 1\r\nx-two: b\r\nContent-Length: 2\r\n",
			want:   []string{"X-Two: a", "X-Two: b", "X-One: 1"}},
		{name: "error code", status: "503 Service Unavailable", body: "{}",
			fields: "Content-Length: 2\r\nX-Infergate-Error: engine_code\r\n",
			want:   []string{"X-Infergate-Error: engine_code", "X-Request-Id: rid-1"}},
		{name: "many fields", status: "200 OK", body: "{}",
			fields: "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nContent-Length: 2\r\n",
			want:   []string{"A: 1", "B: 2", "C: 3", "D: 4", "E: 5", "F: 6", "Content-Length: 2"}},
		{name: "no content, invalid length", status: "204 No Content",
			fields: "Content-Length: x\r\nX-A: 1\r\n",
			want:   []string{"X-A: 1"}, absent: []string{"content-length:"}},
		{name: "bare CR", status: "200 OK", body: "{}",
			fields: "Content-Length: 2\r\nX-Cr: a\rb\r\n",
			want:   []string{"X-Cr: a b"}},
		{name: "stream", status: "200 OK", body: "data: 1\n\n",
			fields: "Content-Type: text/event-stream\r\nContent-Length: 9\r\nCache-Control: no-cache\r\n",
			want:   []string{"Content-Type: text/event-stream", "Cache-Control: no-cache", "Content-Length: 9"}},
	}
	for _, fe := range []string{FrontEndLean, FrontEndNetHTTP} {
		t.Run(fe, func(t *testing.T) {
			o := testOptions()
			o.HTTPFrontEnd = fe
			rt, _ := newTestRuntime(t, o)
			// After the runtime: its goroutines are closed first.
			eng := rawHeadEngine(t, func(n int) string {
				tc := tests[n]
				return "HTTP/1.1 " + tc.status + "\r\n" + tc.fields + "\r\n" + tc.body
			})
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng, 1))
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			gw := r.Key.ListenAddr().String()
			for i, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					head, _ := hopExchange(t, gw, "?r="+strconv.Itoa(i), "X-Request-Id: rid-1\r\n")
					lines := strings.Split(head, "\r\n")
					at := -1
					for _, w := range tc.want {
						j := slices.Index(lines, w)
						if j < 0 {
							t.Fatalf("no %q in %q", w, head)
						}
						name, _, _ := strings.Cut(w, ":")
						if prev := at; prev >= 0 && strings.HasPrefix(lines[prev], name+":") && j < prev {
							t.Fatalf("%q before the earlier value in %q", w, head)
						}
						at = j
					}
					for _, a := range tc.absent {
						if strings.Contains(strings.ToLower(head), "\n"+a) {
							t.Fatalf("%q in %q", a, head)
						}
					}
					if n := strings.Count(strings.ToLower(head), "\nx-request-id:"); n != 1 {
						t.Fatalf("%d request ids in %q", n, head)
					}
				})
			}
		})
	}
}

// rawHeadEngine is a raw HTTP/1.1 engine answering each request with
// answer(N) for ?r=N in its target.
func rawHeadEngine(t *testing.T, answer func(n int) string) string {
	t.Helper()
	return rawCaseEngine(t, func(c net.Conn, _ *http.Request, n int) bool {
		_, err := io.WriteString(c, answer(n))
		return err == nil
	})
}

// rawCaseEngine is a raw HTTP/1.1 engine that reads each request (its
// body drained) and lets answer write to the connection for ?r=N in its
// target; answer's false ends the connection.
func rawCaseEngine(t *testing.T, answer func(c net.Conn, req *http.Request, n int) bool) string {
	t.Helper()
	return serveRaw(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			n, _ := strconv.Atoi(req.URL.Query().Get("r"))
			if !answer(c, req, n) {
				return
			}
		}
	})
}
