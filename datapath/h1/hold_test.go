package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestRequestsAroundTheWait sends requests at every moment relative to the
// connection's wait for its next request (served inside the socket's read
// wait where raw calls are on): in the same write as the last one, while
// its handler runs (bytes that arrive before the wait is armed), in part
// before and in part after the answer, with a body split across the wait,
// and after the answer. Every request must be answered, in order; a missed
// one would leave the client waiting past the 5 s read bound (the idle
// bound is a minute).
func TestRequestsAroundTheWait(t *testing.T) {
	type action struct {
		send    string // bytes the client writes
		await   bool   // wait until /hold's handler runs
		release bool   // let /hold's handler return
		read    string // the body of the next response
		// pause lets the server read what was sent before the next send
		// (a server slower than that tests less here, never fails).
		pause bool
	}
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	tests := []struct {
		name    string
		actions []action
	}{
		{"two requests in one write", []action{
			{send: get("/a") + get("/b")}, {read: "/a:"}, {read: "/b:"}}},
		{"next request while the handler runs", []action{
			{send: get("/hold")}, {await: true}, {send: get("/b")}, {release: true}, {read: "/hold:"}, {read: "/b:"}}},
		{"next head cut by the wait", []action{
			{send: get("/hold")}, {await: true}, {send: "GET /b HTTP/1.1\r\nHo"}, {release: true}, {read: "/hold:"},
			{send: "st: x\r\n\r\n"}, {read: "/b:"}}},
		{"empty lines before a head cut by the wait", []action{
			{send: "\r\n\r\nGET /a HTTP/1.1\r\nHo"}, {pause: true}, {send: "st: x\r\n\r\n"}, {read: "/a:"}}},
		{"three while the handler runs", []action{
			{send: get("/hold")}, {await: true}, {send: get("/b") + get("/c")}, {send: get("/d")}, {release: true},
			{read: "/hold:"}, {read: "/b:"}, {read: "/c:"}, {read: "/d:"}}},
		{"body split across the wait", []action{
			{send: "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345"}, {pause: true}, {send: "67890"}, {read: "/a:1234567890"},
			{send: get("/b")}, {read: "/b:"}}},
		{"chunked body", []action{
			{send: "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + get("/b")},
			{read: "/a:abc"}, {read: "/b:"}}},
		{"next request after the answer", []action{
			{send: get("/a")}, {read: "/a:"}, {send: get("/b")}, {read: "/b:"}, {send: get("/c")}, {read: "/c:"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			started, gate := make(chan struct{}, 1), make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					started <- struct{}{}
					select {
					case <-gate:
					case <-time.After(5 * time.Second):
					}
				}
				b, _ := io.ReadAll(r.Body)
				_, _ = io.WriteString(w, r.URL.Path+":"+string(b))
			})
			s := &Server{Handler: h, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute}
			nc, err := net.Dial("tcp", serveOn(t, s))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(nc)
			for i, a := range tt.actions {
				switch {
				case a.send != "":
					if _, err := io.WriteString(nc, a.send); err != nil {
						t.Fatalf("action %d: write: %v", i, err)
					}
				case a.await:
					select {
					case <-started:
					case <-time.After(5 * time.Second):
						t.Fatalf("action %d: the handler did not start", i)
					}
				case a.release:
					close(gate)
				case a.pause:
					time.Sleep(50 * time.Millisecond)
				default:
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("action %d: want the answer %q: %v", i, a.read, err)
					}
					b, _ := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if string(b) != a.read {
						t.Fatalf("action %d: answer %q, want %q", i, b, a.read)
					}
				}
			}
		})
	}
}

// TestCloseDoesNotWaitForHandler: Close ends a connection whose request is
// served inside the socket's read wait without waiting for its handler,
// which holds the descriptor's read lock: the client sees the close and the
// request's context ends.
func TestCloseDoesNotWaitForHandler(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(ended)
		case <-time.After(5 * time.Second):
		}
		<-release // a handler that ignores its context past that point
	})
	s := &Server{Handler: h, IdleTimeout: time.Minute}
	nc, err := net.Dial("tcp", serveOn(t, s)) // the test closes s; cleanup again, harmless
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(nc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	closed := make(chan struct{})
	go func() { _ = s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the handler")
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the request's context did not end")
	}
	if b, err := io.ReadAll(nc); err != nil || len(b) != 0 {
		t.Fatalf("client read %q, %v; want the close", b, err)
	}
}
