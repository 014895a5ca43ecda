package datapath

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// ipRecorder is a ResponseWriter whose front end parsed its connection's
// client address (as h1's does), or says it did not.
type ipRecorder struct {
	*httptest.ResponseRecorder
	ip netip.Addr
	ok bool
}

func (w ipRecorder) RemoteIP() (netip.Addr, bool) { return w.ip, w.ok }

// TestRequestIP: the connection's parse when the front end has one, else
// the request's RemoteAddr parsed as admission.RemoteIP does.
func TestRequestIP(t *testing.T) {
	conn := netip.MustParseAddr("10.0.0.9")
	for _, c := range []struct {
		name   string
		w      http.ResponseWriter
		remote string
		want   netip.Addr
	}{
		{"connection's parse", ipRecorder{httptest.NewRecorder(), conn, true}, "192.0.2.1:5000", conn},
		{"front end without one", ipRecorder{httptest.NewRecorder(), conn, false}, "192.0.2.1:5000", netip.MustParseAddr("192.0.2.1")},
		{"net/http's writer", httptest.NewRecorder(), "[::ffff:192.0.2.2]:1", netip.MustParseAddr("192.0.2.2")},
		{"net/http, v6", httptest.NewRecorder(), "[2001:db8::1]:443", netip.MustParseAddr("2001:db8::1")},
		{"net/http, unparsable", httptest.NewRecorder(), "pipe", netip.Addr{}},
	} {
		r := &http.Request{RemoteAddr: c.remote}
		if got := requestIP(c.w, r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
