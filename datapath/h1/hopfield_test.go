package h1

import (
	"net/http"
	"testing"

	"github.com/infergate/infergate/datapath/hop"
)

// TestParseRequestHopField: the parser marks a head holding a hop-by-hop
// field in any spelling, so that the proxy strips it; only a head with
// none may skip hop.Strip, and then stripping a copy changes nothing.
func TestParseRequestHopField(t *testing.T) {
	const get = "GET / HTTP/1.1\r\nHost: x\r\n"
	tests := []struct {
		name, fields string
		want         bool
	}{
		{"none", "Accept: */*\r\nUser-Agent: t\r\nX-Request-Id: r\r\n", false},
		{"uncommon names", "X-Custom: 1\r\nx-other: 2\r\nX-Connection: 3\r\nTe-Foo: 4\r\n", false},
		{"hop name as a value", "X-Note: Connection, Upgrade\r\n", false},
		{"Connection", "Connection: keep-alive\r\n", true},
		{"connection", "connection: close\r\n", true},
		{"CONNECTION", "CONNECTION: x-secret\r\nX-Secret: s\r\n", true},
		{"cOnNeCtIoN", "cOnNeCtIoN: x-secret\r\n", true},
		{"Connection twice", "Connection: a\r\nConnection: b\r\n", true},
		{"Connection empty", "Connection:\r\n", true},
		{"Te", "Te: trailers\r\n", true},
		{"TE", "TE: trailers\r\n", true},
		{"te", "te: trailers\r\n", true},
		{"Keep-Alive", "Keep-Alive: timeout=5\r\n", true},
		{"keep-alive", "keep-alive: timeout=5\r\n", true},
		{"KEEP-ALIVE", "KEEP-ALIVE: timeout=5\r\n", true},
		{"Proxy-Connection", "Proxy-Connection: keep-alive\r\n", true},
		{"proxy-connection", "proxy-connection: keep-alive\r\n", true},
		{"Proxy-Authorization", "Proxy-Authorization: Basic eA==\r\n", true},
		{"proxy-authorization", "proxy-authorization: Basic eA==\r\n", true},
		{"Proxy-Authenticate", "Proxy-Authenticate: Basic\r\n", true},
		{"Upgrade", "Upgrade: websocket\r\n", true},
		{"UPGRADE", "UPGRADE: websocket\r\n", true},
		{"Trailer", "Trailer: X-T\r\n", true},
		{"trailer", "trailer: X-T\r\n", true},
		{"Expect", "Expect: 100-continue\r\n", true},
		{"expect", "expect: 100-continue\r\n", true},
		{"after many others", "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nte: x\r\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, p, err := parseRaw(get + tc.fields + "\r\n")
			if err != nil {
				t.Fatal(err)
			}
			if p.hopField != tc.want {
				t.Fatalf("hopField = %v, want %v (header %v)", p.hopField, tc.want, r.Header)
			}
			if !p.hopField {
				h := r.Header.Clone()
				hop.Strip(h)
				if len(h) != len(r.Header) {
					t.Fatalf("hop-free head, yet Strip removed fields: %v → %v", r.Header, h)
				}
			}
		})
	}
	// Transfer-Encoding is framing, not a stored field, yet still marks.
	if _, p, err := parseRaw("POST / HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n"); err != nil || !p.hopField {
		t.Fatalf("transfer-encoding: hopField %v, %v", p.hopField, err)
	}
}

// TestArrivedHopFree: the ResponseWriter's Arrival reports the parse's
// mark, and false without a request state.
func TestArrivedHopFree(t *testing.T) {
	for _, tc := range []struct {
		rs   *reqState
		want bool
	}{
		{nil, false},
		{&reqState{hopFree: false}, false},
		{&reqState{hopFree: true}, true},
	} {
		w := &response{rs: tc.rs}
		var rw http.ResponseWriter = w
		a, ok := rw.(interface{ Arrived() Arrival })
		if !ok || a.Arrived().HopFree != tc.want {
			t.Errorf("Arrived().HopFree with %+v = %v, want %v", tc.rs, ok && a.Arrived().HopFree, tc.want)
		}
	}
}
