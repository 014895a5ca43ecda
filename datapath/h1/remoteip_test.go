package h1

import (
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
)

// TestRemoteIP: with Server.RemoteIP set, every request's writer reports
// its result for the request's RemoteAddr, parsed once per connection;
// without it, none.
func TestRemoteIP(t *testing.T) {
	for _, c := range []struct {
		name  string
		parse bool
	}{
		{"parsed per connection", true},
		{"no parser", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			type seen struct {
				ip     netip.Addr
				ok     bool
				remote string
			}
			got := make(chan seen, 4)
			s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ip, ok := w.(interface{ RemoteIP() (netip.Addr, bool) }).RemoteIP()
				got <- seen{ip, ok, r.RemoteAddr}
			})}
			if c.parse {
				s.RemoteIP = func(a string) netip.Addr {
					calls.Add(1)
					return netip.MustParseAddrPort(a).Addr()
				}
			}
			nc, br := dialServer(t, serveOn(t, s))
			for i := range 3 {
				sendAndDrain(t, nc, br, "GET /"+strconv.Itoa(i)+" HTTP/1.1\r\nHost: x\r\n\r\n")
				g := <-got
				switch {
				case g.ok != c.parse:
					t.Errorf("request %d: ok %v, want %v", i, g.ok, c.parse)
				case c.parse && g.ip != netip.MustParseAddrPort(g.remote).Addr():
					t.Errorf("request %d: %v, want the parse of %q", i, g.ip, g.remote)
				}
			}
			if want := map[bool]int32{true: 1, false: 0}[c.parse]; calls.Load() != want {
				t.Errorf("RemoteIP called %d times for one connection, want %d", calls.Load(), want)
			}
		})
	}
}
