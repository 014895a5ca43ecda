//go:build unix

package datapath

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/h1"
	"github.com/infergate/infergate/datapath/sockio"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// BenchmarkHandler is the handler's own work on one small proxied request
// (the listener's admission, checks, match, pick, relay and observation),
// with the front end and the engine client stubbed out: an h1-like
// ResponseWriter that buffers nothing and a Sender that answers a canned
// small completion from memory, as the engine client does when the whole
// answer came with its head. Its ns/op and allocs/op are the handler's
// share of what BenchmarkFrontEnd measures through sockets.
func BenchmarkHandler(b *testing.B) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.SetLevel(logrus.WarnLevel) // the daemon's under proxy.sh: no access lines
	rt := New(DefaultOptions(), nil, log)
	defer func() { _ = rt.Close(b.Context()) }()
	r := newRule("127.0.0.1", freePort(b), spec.SelRoundRobin, spec.Endpoint{ID: "127.0.0.1:9", Addr: mustAddrPort("127.0.0.1:9"), Weight: 1})
	if err := rt.Install(nil, r); err != nil {
		b.Fatal(err)
	}
	ln := rt.listeners[r.Key.ListenAddr()]
	if ln == nil {
		b.Fatal("no listener")
	}
	rt.sender = cannedSender{}
	h := ln.admitRequests(ln)
	reqBody := []byte(`{"model":"fake-model","prompt":"hello","max_tokens":4}`)
	w := &benchWriter{}
	req := &http.Request{
		Method: http.MethodPost, RequestURI: "/v1/completions", URL: &url.URL{Path: "/v1/completions"},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: r.Key.ListenAddr().String(),
		RemoteAddr: "127.0.0.1:40000", ContentLength: int64(len(reqBody)),
	}
	req = req.WithContext(context.Background())
	rb := &benchBody{}
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		req.Header = http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(reqBody))}}
		rb.Reset(reqBody)
		req.Body = rb
		w.reset()
		h.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
	// The process's CPU time per request: on a box shared with other
	// work, ns/op counts the time slices others took; CPU time does not.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestStreamedBodyDeadlineLifted: a body streamed to the engine has the
// client read deadline lifted once its end is read, and a body the engine
// took without reading its end gets it lifted by the relay; either way the
// answer is relayed with no read deadline on the client connection.
func TestStreamedBodyDeadlineLifted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		readBody bool // the Sender reads the streamed body to its end
		want     int  // lifts (zero deadlines) set on the client connection
	}{
		{"read to its end", true, 1},
		{"not read to its end", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			if o.BodyReadTimeout <= 0 {
				t.Fatal("the default BodyReadTimeout is off; the test needs it on")
			}
			rt := New(o, nil, nil)
			t.Cleanup(func() { _ = rt.Close(context.Background()) })
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, spec.Endpoint{ID: "127.0.0.1:9", Addr: mustAddrPort("127.0.0.1:9"), Weight: 1})
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			ln := rt.listeners[r.Key.ListenAddr()]
			rt.sender = cannedSender{skipBody: !tc.readBody}
			body := `{"prompt":"hello"}`
			req := (&http.Request{
				Method: http.MethodPost, RequestURI: "/v1/completions", URL: &url.URL{Path: "/v1/completions"},
				Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: r.Key.ListenAddr().String(),
				RemoteAddr: "127.0.0.1:40000", ContentLength: int64(len(body)),
				Header: http.Header{"Content-Type": {"application/json"}},
			}).WithContext(context.Background())
			rb := &benchBody{}
			rb.Reset([]byte(body))
			req.Body = rb
			var reads []time.Time
			w := &benchWriter{reads: &reads}
			w.reset()
			ln.admitRequests(ln).ServeHTTP(w, req)
			if w.status != http.StatusOK {
				t.Fatalf("status %d", w.status)
			}
			lifts := 0
			for _, d := range reads {
				if d.IsZero() {
					lifts++
				}
			}
			if lifts != tc.want || len(reads) == 0 || !reads[len(reads)-1].IsZero() {
				t.Errorf("read deadlines set %v: %d lifts, want %d, the last one a lift", reads, lifts, tc.want)
			}
		})
	}
}

// TestEndedAtMono: the answer's end the handler tells the front end is
// one moment in both forms, its Mono (the idle deadline's start, made
// from the request's start and its latency) the time's own.
func TestEndedAtMono(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string // the client's request body
	}{
		{"small request", `{"prompt":"hello"}`},
		{"no body", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := New(DefaultOptions(), nil, nil)
			t.Cleanup(func() { _ = rt.Close(context.Background()) })
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, spec.Endpoint{ID: "127.0.0.1:9", Addr: mustAddrPort("127.0.0.1:9"), Weight: 1})
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			ln := rt.listeners[r.Key.ListenAddr()]
			rt.sender = cannedSender{}
			req := (&http.Request{
				Method: http.MethodPost, RequestURI: "/v1/completions", URL: &url.URL{Path: "/v1/completions"},
				Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: r.Key.ListenAddr().String(),
				RemoteAddr: "127.0.0.1:40000", ContentLength: int64(len(tc.body)),
				Header: http.Header{"Content-Type": {"application/json"}},
			}).WithContext(context.Background())
			rb := &benchBody{}
			rb.Reset([]byte(tc.body))
			req.Body = rb
			var ends []endMark
			w := &benchWriter{ends: &ends}
			w.reset()
			ln.admitRequests(ln).ServeHTTP(w, req)
			if len(ends) != 1 {
				t.Fatalf("status %d, %d ends told, want 1", w.status, len(ends))
			}
			if e := ends[0]; e.t.IsZero() || e.at != sockio.MonoOf(e.t) {
				t.Errorf("end told as %v and Mono %d; the time's Mono is %d", e.t, e.at, sockio.MonoOf(e.t))
			}
		})
	}
}

// cannedSender answers every leg with a small completion whose body is
// already in memory, its headers parsed into leg.Into when given (as the
// engine client does), after reading a streamed body to its end.
type cannedSender struct {
	skipBody bool // leave a streamed body unread
}

const cannedAnswer = `{"id":"cmpl-bench","object":"text_completion","created":1,"model":"fake-model","choices":[{"index":0,"text":" a b c d","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":4,"total_tokens":5}}`

func (cs cannedSender) Send(_ context.Context, leg upstream.Leg) (*http.Response, error) {
	if s := leg.Stream; s != nil && !cs.skipBody {
		_, _ = io.Copy(io.Discard, s.R)
	}
	h := leg.Into
	if h == nil {
		h = http.Header{}
	}
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(cannedAnswer))}
	h["X-Fake-Engine"] = []string{"bench"}
	return &http.Response{StatusCode: http.StatusOK, Header: h, ContentLength: int64(len(cannedAnswer)), Body: &cannedBody{r: *bytes.NewReader([]byte(cannedAnswer))}}, nil
}

// cannedBody is an engine body held in memory (upstream.BoundedBody).
type cannedBody struct{ r bytes.Reader }

func (c *cannedBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == nil && c.r.Len() == 0 {
		err = io.EOF
	}
	return n, err
}
func (c *cannedBody) Close() error                { return nil }
func (c *cannedBody) Buffered() bool              { return true }
func (c *cannedBody) SetReadDeadline(_ time.Time) {}

// benchBody is a client body that ends with the bytes it has.
type benchBody struct{ r bytes.Reader }

func (b *benchBody) Reset(p []byte) { b.r.Reset(p) }
func (b *benchBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == nil && b.r.Len() == 0 {
		err = io.EOF
	}
	return n, err
}
func (b *benchBody) Close() error { return nil }

// benchWriter is a ResponseWriter with h1's extras (the start, the
// scratch slot, the end mark, deadlines) that keeps nothing it is sent.
type benchWriter struct {
	h       http.Header
	status  int
	start   time.Time
	scratch any
	// reads, when set, records the read deadlines set (tests).
	reads *[]time.Time
	// ends, when set, records the answer's ends the handler tells (tests).
	ends *[]endMark
}

// endMark is one EndedAt: the answer's end as a time.Time and as a Mono.
type endMark struct {
	t  time.Time
	at sockio.Mono
}

func (w *benchWriter) reset() {
	if w.h == nil {
		w.h = http.Header{}
	}
	clear(w.h)
	w.status = 0
	w.start = time.Now()
}
func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}
func (w *benchWriter) Flush()              {}
func (w *benchWriter) Arrived() h1.Arrival { return h1.Arrival{Start: w.start} }
func (w *benchWriter) Scratch() *any       { return &w.scratch }
func (w *benchWriter) EndedAt(t time.Time, at sockio.Mono) {
	if w.ends != nil {
		*w.ends = append(*w.ends, endMark{t, at})
	}
}
func (w *benchWriter) SetReadDeadline(t time.Time) error {
	if w.reads != nil {
		*w.reads = append(*w.reads, t)
	}
	return nil
}
func (w *benchWriter) SetWriteDeadline(time.Time) error { return nil }
