package datapath

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// roomCase is an engine answer for TestBodyRoomRelay: its body, sent in
// the pieces given (a pause between two), framed by Content-Length or
// chunked coding; short cuts the body after its first piece and closes.
type roomCase struct {
	name    string
	method  string
	pieces  []string
	chunked bool
	short   bool
}

var roomCases = []roomCase{
	{name: "fits the room", pieces: []string{`{"text":"` + strings.Repeat("a", 300) + `"}`}},
	{name: "fits the room, two reads", pieces: []string{`{"text":"` + strings.Repeat("b", 100), strings.Repeat("c", 100) + `"}`}},
	{name: "bigger than the room", pieces: []string{strings.Repeat("d", 10<<10)}},
	{name: "fills the room in pieces", pieces: []string{strings.Repeat("e", 1000), strings.Repeat("f", 3000), strings.Repeat("g", 40<<10)}},
	{name: "empty", pieces: []string{""}},
	{name: "engine closes early", pieces: []string{strings.Repeat("h", 200), strings.Repeat("i", 200)}, short: true},
	{name: "chunked", pieces: []string{`{"a":`, `1}`}, chunked: true},
	{name: "HEAD", method: http.MethodHead, pieces: []string{strings.Repeat("j", 300)}},
}

// rawRoomEngine answers each request with roomCases[r] (?r=N).
func rawRoomEngine(t *testing.T) string {
	t.Helper()
	return rawCaseEngine(t, func(c net.Conn, req *http.Request, n int) bool {
		rc := roomCases[n]
		body := strings.Join(rc.pieces, "")
		head := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		if rc.chunked {
			head += "Transfer-Encoding: chunked\r\n\r\n"
		} else {
			head += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		}
		if _, err := io.WriteString(c, head); err != nil {
			return false
		}
		if req.Method == http.MethodHead {
			return true
		}
		for i, p := range rc.pieces {
			if i > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			if rc.chunked {
				p = strconv.FormatInt(int64(len(p)), 16) + "\r\n" + p + "\r\n"
			}
			if _, err := io.WriteString(c, p); err != nil {
				return false
			}
			if rc.short {
				return false // the serveRaw goroutine closes the connection
			}
		}
		if rc.chunked {
			_, _ = io.WriteString(c, "0\r\n\r\n")
		}
		return true
	})
}

// TestBodyRoomRelay: on both plaintext front ends, a body the relay reads
// into the client's write buffer (h1.BodyRoom, the lean front end) or
// through its pooled buffer reaches the client as the engine sent it,
// framed as before: a body that fits the room, one bigger (the relay
// fills the room, then goes on with its buffer), an empty one, a chunked
// one (no room lent), a HEAD answer (none either), each followed on the
// same connection by another request; and a body the engine cuts short
// leaves the client with a cut answer or none, never a complete-looking
// one.
func TestBodyRoomRelay(t *testing.T) {
	for _, fe := range []string{FrontEndLean, FrontEndNetHTTP} {
		t.Run(fe, func(t *testing.T) {
			o := testOptions()
			o.HTTPFrontEnd = fe
			rt := New(o, metrics.NewDatapath(prometheus.NewRegistry()), nil)
			closeAtEnd(t, rt)
			addr := rawRoomEngine(t)
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, addr, 1))
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			c := testClient()
			for i, rc := range roomCases {
				t.Run(rc.name, func(t *testing.T) {
					method := rc.method
					if method == "" {
						method = http.MethodPost
					}
					url := ruleURL(r) + "/v1/completions?r=" + strconv.Itoa(i)
					for range 2 { // the second on the connection the first left
						req, err := http.NewRequest(method, url, strings.NewReader(completionBody))
						if err != nil {
							t.Fatal(err)
						}
						req.Header.Set("Content-Type", "application/json")
						resp, err := c.Do(req)
						if err != nil && rc.short {
							break // the cut answer was dropped whole, head and all
						}
						if err != nil {
							t.Fatal(err)
						}
						got, rerr := io.ReadAll(resp.Body)
						resp.Body.Close()
						want := strings.Join(rc.pieces, "")
						switch {
						case rc.short:
							if rerr == nil {
								t.Fatalf("cut body read whole: %d bytes, want an error", len(got))
							}
						case rerr != nil:
							t.Fatalf("reading body: %v", rerr)
						case method == http.MethodHead:
							if len(got) != 0 || resp.ContentLength != int64(len(want)) {
								t.Fatalf("HEAD: body %q, Content-Length %d, want none and %d", got, resp.ContentLength, len(want))
							}
						case string(got) != want:
							t.Fatalf("body %d bytes, want %d (%.40q…)", len(got), len(want), want)
						}
						if resp.StatusCode != http.StatusOK {
							t.Fatalf("status %d", resp.StatusCode)
						}
					}
				})
			}
		})
	}
}

// TestBodyRoomLent: on the lean front end the relay takes a buffer from
// its pool only for a body the client writer's room does not take whole:
// none for a body that fits (in one read or two), one for a body bigger
// than the room, an empty body (no room for it), a chunked answer and a
// HEAD answer (no room lent). Each case on a runtime of its own, whose
// pool is empty at first: a buffer taken is a buffer made.
func TestBodyRoomLent(t *testing.T) {
	for i, rc := range roomCases {
		if rc.short {
			continue // cut: the same reads as a body that fits
		}
		wantPool := rc.chunked || rc.method == http.MethodHead || len(strings.Join(rc.pieces, "")) == 0 || len(strings.Join(rc.pieces, "")) > 4<<10
		t.Run(rc.name, func(t *testing.T) {
			o := testOptions()
			o.HTTPFrontEnd = FrontEndLean
			rt := New(o, metrics.NewDatapath(prometheus.NewRegistry()), nil)
			closeAtEnd(t, rt)
			var made atomic.Int64
			rt.bufs.New = func() any { made.Add(1); b := make([]byte, 32<<10); return &b }
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, rawRoomEngine(t), 1))
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			method := rc.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequest(method, ruleURL(r)+"/v1/completions?r="+strconv.Itoa(i), strings.NewReader(completionBody))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			res := do(t, testClient(), req)
			if res.status != http.StatusOK {
				t.Fatalf("status %d", res.status)
			}
			if got := made.Load() > 0; got != wantPool {
				t.Errorf("relay buffers made %d, want a buffer taken %v", made.Load(), wantPool)
			}
		})
	}
}
