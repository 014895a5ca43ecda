package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestHalfCloseAfterRequests: a client that writes its requests and then
// its FIN (printf ... | nc -N) must see the connection end once they are
// answered, not wait for the idle bound (a minute here; the client's read
// gives up after 5 s). The FIN is queued with the requests before the
// server reads them (ConnState holds the server back), so the readiness
// that reports the requests also reports the FIN, and a short read of
// them does not mean that nothing more is pending.
func TestHalfCloseAfterRequests(t *testing.T) {
	get := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
	tests := []struct {
		name string
		send string
		want []string
	}{
		{"one request", get("/a"), []string{"/a"}},
		{"two pipelined", get("/a") + get("/b"), []string{"/a", "/b"}},
		{"body buffered", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", []string{"/a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, r.URL.Path)
			})
			sent := make(chan struct{})
			s := &Server{Handler: h, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute,
				ConnState: func(_ net.Conn, st http.ConnState) {
					if st == http.StateNew {
						select {
						case <-sent:
						case <-time.After(5 * time.Second):
						}
						// Let the runtime's poller take the readiness in
						// before the wait starts (a slower poller tests
						// less here, never fails).
						time.Sleep(50 * time.Millisecond)
					}
				}}
			nc, err := net.Dial("tcp", serveOn(t, s))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(nc, tt.send); err != nil {
				t.Fatal(err)
			}
			if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			close(sent)
			br := bufio.NewReader(nc)
			for _, want := range tt.want {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("want the answer to %s: %v", want, err)
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if string(b) != want {
					t.Fatalf("answer %q, want %q", b, want)
				}
			}
			rest, err := io.ReadAll(br)
			if err != nil || len(rest) != 0 {
				t.Fatalf("after the answers: read %q, %v; want the server's close", rest, err)
			}
		})
	}
}
