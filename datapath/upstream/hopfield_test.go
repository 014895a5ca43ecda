package upstream

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/hop"
)

// TestParseHeadHopField: an engine head holding a hop-by-hop field in any
// spelling is marked, into a new map and into the client's (Leg.Into);
// only a head with none may skip hop.Strip, and then stripping a copy
// changes nothing.
func TestParseHeadHopField(t *testing.T) {
	tests := []struct {
		name, fields string
		want         bool
	}{
		{"none", "Content-Type: application/json\r\nDate: d\r\nServer: s\r\n", false},
		{"lowercase none", "content-type: application/json\r\nx-request-id: e\r\nvary: a\r\n", false},
		{"uncommon names", "X-Custom: 1\r\nx-connection: 2\r\nTe-Foo: 3\r\n", false},
		{"hop name as a value", "X-Note: Connection, Upgrade\r\n", false},
		{"Connection", "Connection: keep-alive\r\n", true},
		{"connection", "connection: keep-alive\r\n", true},
		{"CONNECTION", "CONNECTION: x-secret\r\nX-Secret: s\r\n", true},
		{"Connection naming a field", "Connection: x-secret\r\nx-secret: s\r\n", true},
		{"Connection twice", "Connection: a\r\nConnection: b\r\n", true},
		{"Keep-Alive", "Keep-Alive: timeout=5\r\n", true},
		{"KEEP-alive", "KEEP-alive: timeout=5\r\n", true},
		{"Te", "Te: trailers\r\n", true},
		{"TE", "TE: trailers\r\n", true},
		{"Trailer", "Trailer: X-T\r\n", true},
		{"tRAILER", "tRAILER: X-T\r\n", true},
		{"Upgrade", "Upgrade: h2c\r\n", true},
		{"upgrade", "upgrade: h2c\r\n", true},
		{"Expect", "Expect: x\r\n", true},
		{"Proxy-Connection", "Proxy-Connection: keep-alive\r\n", true},
		{"proxy-authenticate", "proxy-authenticate: Basic\r\n", true},
		{"Proxy-Authorization", "Proxy-Authorization: Basic eA==\r\n", true},
		{"Transfer-Encoding", "Transfer-Encoding: chunked\r\n", true},
		{"transfer-encoding", "transfer-encoding: chunked\r\n", true},
		{"after many others", "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\nte: x\r\n", true},
	}
	for _, tc := range tests {
		for _, into := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "", true: "/into"}[into], func(t *testing.T) {
				body := "0\r\n\r\n"
				if !strings.Contains(strings.ToLower(tc.fields), "transfer-encoding") {
					body = ""
					tc.fields += "Content-Length: 0\r\n"
				}
				br := bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\n" + tc.fields + "\r\n" + body))
				var h http.Header
				if into {
					h = http.Header{headerRequestID: {"client"}}
				}
				ur := new(response)
				rb, err := readResponseInto(ur, br, http.MethodPost, h)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, rb)
				if ur.hopField != tc.want {
					t.Fatalf("hopField = %v, want %v (header %v)", ur.hopField, tc.want, ur.resp.Header)
				}
				if !ur.hopField {
					c := ur.resp.Header.Clone()
					hop.Strip(c)
					if len(c) != len(ur.resp.Header) {
						t.Fatalf("hop-free head, yet Strip removed fields: %v → %v", ur.resp.Header, c)
					}
				}
			})
		}
	}
}

// TestHopFree: only a Client body vouches for its head; any other
// response is stripped.
func TestHopFree(t *testing.T) {
	for _, tc := range []struct {
		name string
		body io.ReadCloser
		want bool
	}{
		{"client body, hop-free", &body{hopFree: true}, true},
		{"client body, hop field", &body{}, false},
		{"another body", io.NopCloser(strings.NewReader("")), false},
		{"no body", http.NoBody, false},
	} {
		if got := HopFree(&http.Response{Body: tc.body}); got != tc.want {
			t.Errorf("%s: HopFree = %v, want %v", tc.name, got, tc.want)
		}
	}
}
