package h1

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/infergate/infergate/datapath/sockio"
)

// startServer serves h on a loopback port until the test ends.
func startServer(t *testing.T, h http.Handler) (*Server, string) {
	t.Helper()
	s := &Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second}
	return s, serveOn(t, s)
}

// serveOn serves s on a loopback port, closed when the test ends, and
// returns its address.
func serveOn(t *testing.T, s *Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close(); <-done })
	return l.Addr().String()
}

func TestServerResponses(t *testing.T) {
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			b, _ := io.ReadAll(r.Body)
			_, _ = w.Write(append([]byte("got:"), b...))
		case "/length":
			w.Header().Set("Content-Length", "5")
			w.Header().Set("X-Bad", "a\r\nInjected: 1")
			_, _ = io.WriteString(w, "hello")
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				_, _ = io.WriteString(w, "data: "+string(rune('a'+i))+"\n\n")
				w.(http.Flusher).Flush()
			}
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", 3*smallBody)))
		case "/local":
			a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
			if a != nil {
				_, _ = io.WriteString(w, a.String())
			}
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
		case "/abort":
			_, _ = io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
	}))
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 5 * time.Second}
	tests := []struct {
		method, path, body string
		status             int
		want               string
		check              func(*http.Response) string
	}{
		{"POST", "/small", "{}", 200, "got:{}", func(r *http.Response) string {
			if r.ContentLength != 6 || r.Header.Get("Content-Type") == "" || r.Header.Get("Date") == "" {
				return "held-back body: length, sniffed type, date"
			}
			return ""
		}},
		{"POST", "/small", strings.Repeat("b", 10000), 200, "got:" + strings.Repeat("b", 10000), nil},
		{"GET", "/length", "", 200, "hello", func(r *http.Response) string {
			if r.Header.Get("Injected") != "" {
				return "CRLF in a value started a field"
			}
			return ""
		}},
		{"GET", "/stream", "", 200, "data: a\n\ndata: b\n\ndata: c\n\n", func(r *http.Response) string {
			if len(r.TransferEncoding) != 1 {
				return "flushed stream not chunked"
			}
			return ""
		}},
		{"GET", "/big", "", 200, strings.Repeat("x", 3*smallBody), nil},
		{"GET", "/nocontent", "", 204, "", nil},
		{"GET", "/local", "", 200, addr, nil},
		{"HEAD", "/length", "", 200, "", nil},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, "http://"+addr+tc.path, strings.NewReader(tc.body))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tc.status || string(b) != tc.want {
			t.Errorf("%s %s: %d %q %v, want %d %q", tc.method, tc.path, resp.StatusCode, b, err, tc.status, tc.want)
		}
		if tc.check != nil {
			if msg := tc.check(resp); msg != "" {
				t.Errorf("%s %s: %s (%v)", tc.method, tc.path, msg, resp.Header)
			}
		}
	}
	resp, err := c.Get("http://" + addr + "/abort")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Error("an aborted response read as complete")
	}
}

// TestServerExpectContinue: the client's "Expect: 100-continue" is answered
// when the handler reads the body, so the body follows.
func TestServerExpectContinue(t *testing.T) {
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(nc, "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
	br := bufio.NewReader(nc)
	line, _ := br.ReadString('\n')
	if line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("interim line %q", line)
	}
	_, _ = br.ReadString('\n')
	_, _ = io.WriteString(nc, "ok")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "ok" {
		t.Errorf("body %q", b)
	}
}

// TestServerClientGone: a client that closes its connection while the
// handler waits (nothing written yet) cancels the request's context: the
// disconnect watcher sees it leave, long before the handler's own 30 s
// give-up (the delay is logged, not asserted: a loaded machine stretches it).
func TestServerClientGone(t *testing.T) {
	canceled := make(chan bool, 1)
	started := make(chan struct{})
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			canceled <- true
		case <-time.After(30 * time.Second):
			canceled <- false
		}
	}))
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(nc, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	time.Sleep(3 * watchAfter) // a request long enough to be watched
	closed := time.Now()
	nc.Close()
	if !<-canceled {
		t.Fatal("the request's context did not end when its client left")
	}
	t.Logf("client departure seen after %v", time.Since(closed))
}

// TestServerShutdown: Shutdown closes idle connections, lets an active
// request finish, and the connection closes after its response.
func TestServerShutdown(t *testing.T) {
	release := make(chan struct{})
	inside := make(chan struct{})
	s, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(inside)
			<-release
		}
		_, _ = io.WriteString(w, "done")
	}))
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, _ = io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-inside
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	_ = idle.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection: %v, want EOF", err)
	}
	close(release)
	_ = busy.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close {
		t.Error("response during shutdown does not close the connection")
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// dialServer connects to addr with a 10 s bound on the whole exchange,
// closed when the test ends, and returns a reader of its answers.
func dialServer(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return nc, bufio.NewReader(nc)
}

// sendAndDrain writes a request's bytes on nc and reads its answer from
// br to the end, failing the test if either fails.
func sendAndDrain(t *testing.T, nc net.Conn, br *bufio.Reader, request string) {
	t.Helper()
	if _, err := io.WriteString(nc, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// TestHeaderMapPerResponse: a connection reuses its last response's
// header map for the next response, emptied: every handler starts with no
// fields, and a field one response set never reaches a later one (small
// maps, which are kept, and large ones, which are not), whether the
// requests come one at a time or in one write.
func TestHeaderMapPerResponse(t *testing.T) {
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fields := len(w.Header())
		n := 0
		switch r.URL.Path {
		case "/few":
			n = 2
		case "/many":
			n = 3 * maxSpareFields
		}
		for i := range n {
			w.Header().Set("X-Set-"+strconv.Itoa(i), "v")
		}
		_, _ = io.WriteString(w, "fields at start: "+strconv.Itoa(fields))
	}))
	paths := []string{"/few", "/none", "/many", "/none", "/few", "/few", "/none"}
	heads := make([]string, len(paths))
	for i, p := range paths {
		heads[i] = "GET " + p + " HTTP/1.1\r\nHost: x\r\n\r\n"
	}
	for _, pipelined := range []bool{false, true} {
		t.Run(map[bool]string{false: "one at a time", true: "one write"}[pipelined], func(t *testing.T) {
			for i, a := range roundTrips(t, addr, heads, pipelined) {
				p := paths[i]
				if a.body != "fields at start: 0" {
					t.Errorf("%s: handler saw %q, want an empty header map", p, a.body)
				}
				want := map[string]int{"/few": 2, "/many": 3 * maxSpareFields}[p]
				got := 0
				for k := range a.resp.Header {
					if strings.HasPrefix(k, "X-Set-") {
						got++
					}
				}
				if got != want {
					t.Errorf("%s: %d X-Set- fields, want %d (a field left from an earlier response?)", p, got, want)
				}
			}
		})
	}
}

// answer is one response read by roundTrips, with its body.
type answer struct {
	resp *http.Response
	body string
}

// roundTrips sends heads on one connection, each after the last answer or
// all in one write (pipelined), and returns the answers in order.
func roundTrips(t *testing.T, addr string, heads []string, pipelined bool) []answer {
	t.Helper()
	nc, br := dialServer(t, addr)
	send := func(head string) {
		if _, err := io.WriteString(nc, head); err != nil {
			t.Fatal(err)
		}
	}
	if pipelined {
		send(strings.Join(heads, ""))
	}
	out := make([]answer, len(heads))
	for i, h := range heads {
		if !pipelined {
			send(h)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out[i] = answer{resp, string(body)}
	}
	return out
}

// TestHeaderMapPerRequest: a connection reuses its last request's header
// map for the next request, emptied: every handler sees exactly the
// fields its own request sent, never one an earlier request sent or a
// handler added (small maps, which are kept, and large ones, which are
// not), whether the requests come one at a time or in one write.
func TestHeaderMapPerRequest(t *testing.T) {
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		r.Header.Set("X-Handler-Added", "1") // must not reach the next request
		_, _ = io.WriteString(w, strings.Join(keys, ","))
	}))
	// fieldsFor is each request's own fields (name i of n) beyond Host.
	fieldsFor := map[string]int{"/few": 2, "/none": 0, "/many": 2 * maxSpareRequestFields, "/one": 1}
	paths := []string{"/few", "/none", "/many", "/none", "/few", "/one", "/many", "/few"}
	head := func(path string) string {
		var b strings.Builder
		b.WriteString("GET " + path + " HTTP/1.1\r\nHost: x\r\n")
		for i := range fieldsFor[path] {
			b.WriteString("X-" + strings.TrimPrefix(path, "/") + "-" + strconv.Itoa(i) + ": v\r\n")
		}
		return b.String() + "\r\n"
	}
	want := func(path string) string {
		keys := []string{}
		for i := range fieldsFor[path] {
			keys = append(keys, http.CanonicalHeaderKey("X-"+strings.TrimPrefix(path, "/")+"-"+strconv.Itoa(i)))
		}
		sort.Strings(keys)
		return strings.Join(keys, ",")
	}
	heads := make([]string, len(paths))
	for i, p := range paths {
		heads[i] = head(p)
	}
	for _, pipelined := range []bool{false, true} {
		t.Run(map[bool]string{false: "one at a time", true: "one write"}[pipelined], func(t *testing.T) {
			for i, a := range roundTrips(t, addr, heads, pipelined) {
				if p := paths[i]; a.body != want(p) {
					t.Errorf("%d %s: handler saw fields %q, want %q", i, p, a.body, want(p))
				}
			}
		})
	}
}

// TestArrivedStart: each request's ResponseWriter tells when its head
// began to be read (Arrival.Start), a moment after the client sent it and
// before the handler ran, and a new one for each request on a kept-alive
// connection.
func TestArrivedStart(t *testing.T) {
	type seen struct{ started, inHandler time.Time }
	got := make(chan seen, 4)
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := w.(interface{ Arrived() Arrival })
		if !ok {
			t.Error("the ResponseWriter has no Arrived")
			return
		}
		got <- seen{a.Arrived().Start, time.Now()}
	}))
	nc, br := dialServer(t, addr)
	var last time.Time
	for i := range 3 {
		sent := time.Now()
		sendAndDrain(t, nc, br, "GET /"+strconv.Itoa(i)+" HTTP/1.1\r\nHost: x\r\n\r\n")
		s := <-got
		if s.started.Before(sent) || s.started.After(s.inHandler) || !s.started.After(last) {
			t.Errorf("request %d: started %v, want after the send (%v), after the previous request's (%v) and by the handler's run (%v)",
				i, s.started, sent, last, s.inHandler)
		}
		last = s.started
	}
}

// TestArrived: Arrived's BodyWhole says whether the body was all in the read
// buffer when the head was parsed: no body, or one sent with its head, is
// whole; a body sent after the head was read, or chunked, is not.
func TestArrived(t *testing.T) {
	type seen struct {
		whole, startOK bool
	}
	got := make(chan seen, 4)
	_, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := w.(interface{ Arrived() Arrival })
		if !ok {
			t.Error("the ResponseWriter has no Arrived")
			return
		}
		arr := a.Arrived()
		if !arr.LineChecked {
			t.Error("Arrived: LineChecked false; h1 checks every request line")
		}
		got <- seen{arr.BodyWhole, arr.Start.Equal(w.(*response).rs.start)}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	nc, br := dialServer(t, addr)
	for _, c := range []struct {
		name  string
		head  string
		later string // written once the head has been read
		whole bool
	}{
		{"no body", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "", true},
		{"body with its head", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi", "", true},
		{"body after its head", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n", "hi", false},
		{"chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", "", false},
	} {
		if _, err := io.WriteString(nc, c.head); err != nil {
			t.Fatal(err)
		}
		if c.later != "" {
			time.Sleep(50 * time.Millisecond) // the head is parsed alone
		}
		sendAndDrain(t, nc, br, c.later)
		s := <-got
		if s.whole != c.whole || !s.startOK {
			t.Errorf("%s: whole %v (want %v), Start is the request state's: %v", c.name, s.whole, c.whole, s.startOK)
		}
	}
}

// TestReqStateSizeClass: a request's reqState (its http.Request, URL,
// body, response, header values, the handler's scratch and the write
// buffer it carries between requests) fits the runtime's 1,024 B size
// class. An object over 512 B that holds pointers is allocated with an
// 8 B malloc header before it (Go 1.22 on), so the 896 B state took a
// 1,024 B slot already, and fields up to 1,016 B cost nothing more.
// States are pooled (recycle.go), but the pool is emptied at each
// collection and refilled by allocation; past 1,016 B they move to the
// 1,152 B class. Grow it knowingly, then change this figure.
func TestReqStateSizeClass(t *testing.T) {
	const mallocHeader = 8
	if got := unsafe.Sizeof(reqState{}) + mallocHeader; got > 1024 {
		t.Errorf("reqState with its malloc header is %d B, past the 1,024 B size class", got)
	}
}

// TestConnIdleReports: each request's end is reported once, through
// ConnIdle with the moment the connection went idle when it is set (and
// then not as ConnState's StateIdle), else as ConnState's StateIdle, on
// every serving path: requests served inside the read wait, pipelined
// ones, and a head that arrives in two writes (read on its own).
func TestConnIdleReports(t *testing.T) {
	type report struct {
		state http.ConnState
		at    time.Time // ConnIdle's moment; zero for ConnState
	}
	for _, withIdle := range []bool{true, false} {
		reports := make(chan report, 64)
		s := &Server{
			Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}),
			ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
			ConnState: func(_ net.Conn, st http.ConnState) {
				if st == http.StateIdle {
					reports <- report{state: st}
				}
			},
		}
		if withIdle {
			s.ConnIdle = func(_ net.Conn, at time.Time) { reports <- report{state: http.StateIdle, at: at} }
		}
		addr := serveOn(t, s)
		for _, tc := range []struct {
			name  string
			parts []string // written one after another
			n     int      // requests in them
		}{
			{"one request", []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n"}, 1},
			{"pipelined", []string{"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"}, 2},
			{"head in two writes", []string{"GET / HTTP/1.1\r\nHo", "st: x\r\n\r\n"}, 1},
		} {
			t.Run(map[bool]string{true: "ConnIdle", false: "ConnState"}[withIdle]+"/"+tc.name, func(t *testing.T) {
				nc, br := dialServer(t, addr)
				sent := time.Now()
				for _, p := range tc.parts {
					if _, err := io.WriteString(nc, p); err != nil {
						t.Fatal(err)
					}
					time.Sleep(10 * time.Millisecond) // apart: the second write finds the first read
				}
				for range tc.n {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
				}
				for i := range tc.n {
					select {
					case r := <-reports:
						if withIdle && (r.at.Before(sent) || r.at.After(time.Now())) {
							t.Errorf("report %d: idle at %v, want between the send (%v) and now", i, r.at, sent)
						}
						if !withIdle && !r.at.IsZero() {
							t.Errorf("report %d: a ConnIdle moment without ConnIdle", i)
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("%d idle reports of %d", i, tc.n)
					}
				}
				select {
				case r := <-reports:
					t.Errorf("an extra idle report: %+v", r)
				case <-time.After(20 * time.Millisecond):
				}
			})
		}
	}
}

// TestEndedAtFeedsIdle: a handler that tells when its answer ended
// (EndedAt) has the connection's idle report carry that moment; the next
// request, whose handler tells nothing, gets a reading of the
// connection's own, not the earlier moment again.
func TestEndedAtFeedsIdle(t *testing.T) {
	// Before every send below, so no reading of the connection's own can
	// equal it; recent, so the idle deadline that starts from it is ahead.
	ended := time.Now().Add(-time.Millisecond)
	idles := make(chan time.Time, 4)
	s := &Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/told" {
				w.(interface {
					EndedAt(time.Time, sockio.Mono)
				}).EndedAt(ended, sockio.MonoOf(ended))
			}
		}),
		ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 5 * time.Second,
		ConnIdle: func(_ net.Conn, at time.Time) { idles <- at },
	}
	addr := serveOn(t, s)
	nc, br := dialServer(t, addr)
	for _, tc := range []struct {
		path string
		told bool
	}{{"/told", true}, {"/untold", false}} {
		sent := time.Now()
		if _, err := io.WriteString(nc, "GET "+tc.path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		select {
		case at := <-idles:
			if tc.told && !at.Equal(ended) {
				t.Errorf("%s: idle at %v, want the handler's %v", tc.path, at, ended)
			}
			if !tc.told && at.Before(sent) {
				t.Errorf("%s: idle at %v, before the request was sent (%v): an earlier request's moment", tc.path, at, sent)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no idle report", tc.path)
		}
	}
}

// TestIdleFromEndedAt holds the idle mark and the idle deadline's start
// (idle) to what the handler told (EndedAt): the Mono is taken as given,
// not converted from the time again, and is told once; untold, both come
// from one reading of the connection's own.
func TestIdleFromEndedAt(t *testing.T) {
	ended := time.Now().Add(-time.Millisecond)
	for _, tc := range []struct {
		name string
		told bool
		at   sockio.Mono // the Mono told with ended
	}{
		{"told", true, sockio.MonoOf(ended)},
		{"told, a Mono of its own", true, sockio.MonoOf(ended) + 5},
		{"untold", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var marked time.Time
			c := &conn{srv: &Server{ConnIdle: func(_ net.Conn, at time.Time) { marked = at }}}
			if tc.told {
				(&response{c: c}).EndedAt(ended, tc.at)
			}
			before := sockio.Now()
			from := c.idle()
			switch {
			case tc.told && (from != tc.at || !marked.Equal(ended)):
				t.Errorf("idle from %d, marked %v; want the told %d, %v", from, marked, tc.at, ended)
			case !tc.told && (from < before || from != sockio.MonoOf(marked)):
				t.Errorf("idle from %d, marked %v (%d); want one reading after %d", from, marked, sockio.MonoOf(marked), before)
			}
			if again := c.idle(); tc.told && again == from {
				t.Errorf("a second idle started from the told moment again (%d)", again)
			}
		})
	}
}

// TestIdleHoldsNoReader: a connection served in its read wait waits for
// its next request without a read buffer (it takes one only to read),
// whether its last request's body handed the buffer back, it had no
// body, or its handler left the body unread; and it still serves the next.
func TestIdleHoldsNoReader(t *testing.T) {
	if raceBuild {
		t.Skip("raw socket calls (the read wait's serving) are off under -race")
	}
	for _, tc := range []struct {
		name, req, want string
	}{
		{"body read", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab", "ab"},
		{"no body", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", ""},
		{"body unread", "POST /skip HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, addr := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/skip" {
					return
				}
				b, _ := io.ReadAll(r.Body)
				_, _ = w.Write(b)
			}))
			nc, br := dialServer(t, addr)
			for i := range 2 {
				if _, err := io.WriteString(nc, tc.req); err != nil {
					t.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				if string(b) != tc.want {
					t.Fatalf("request %d: answer %q, want %q", i, b, tc.want)
				}
				s.mu.Lock()
				var c *conn
				for _, c = range s.conns {
				}
				s.mu.Unlock()
				if c == nil || !c.sock.CanHold() {
					t.Skip("no raw socket calls here")
				}
				for deadline := time.Now().Add(5 * time.Second); c.state.Load() != stateIdle; {
					if time.Now().After(deadline) {
						t.Fatal("the connection did not go idle")
					}
					time.Sleep(time.Millisecond)
				}
				// The buffer goes back before the wait, and nothing takes
				// one until the socket is readable again; a little time
				// for the step to reach its wait after the state is idle.
				var held bool
				for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
					held = c.br != nil // no -race build runs this
					if !held || time.Now().After(deadline) {
						break
					}
				}
				if held {
					t.Fatalf("request %d: the idle connection holds a read buffer", i)
				}
			}
		})
	}
}
