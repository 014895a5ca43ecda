package h1

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// listMap is the header a parse's list says (parsed.listed, codes and
// vals), or nil when the head is no list.
func listMap(p parsed, vals []string) http.Header {
	if p.listed < 0 {
		return nil
	}
	h := http.Header{}
	n := 0
	for c := p.codes; c != 0; c >>= 8 {
		h[internNames[c&0xff-1]] = []string{vals[n]}
		n++
	}
	if n != int(p.listed) {
		return http.Header{"listed-count-mismatch": nil}
	}
	return h
}

// TestHeadList: a head whose stored fields are at most maxListed, each a
// common name of its own, is a list in head order that says exactly
// what its map says; any other head is none.
func TestHeadList(t *testing.T) {
	for _, tc := range []struct {
		name, fields string
		order        []string // nil: no list
	}{
		{name: "no fields", order: []string{}},
		{name: "wrk's", fields: "Content-Type: application/json\r\nContent-Length: 2\r\n",
			order: []string{"Content-Type", "Content-Length"}},
		{name: "lower case", fields: "content-type: a\r\naccept: b\r\nx-request-id: c\r\n",
			order: []string{"Content-Type", "Accept", "X-Request-Id"}},
		{name: "mixed case", fields: "CONTENT-type: a\r\n", order: []string{"Content-Type"}},
		{name: "Host and Transfer-Encoding are not stored", fields: "Transfer-Encoding: chunked\r\nAccept: b\r\n",
			order: []string{"Accept"}},
		{name: "eight", fields: "Accept: 1\r\nUser-Agent: 2\r\nOrigin: 3\r\nReferer: 4\r\nCookie: 5\r\nX-Model: 6\r\nX-Api-Key: 7\r\nTe: 8\r\n",
			order: []string{"Accept", "User-Agent", "Origin", "Referer", "Cookie", "X-Model", "X-Api-Key", "Te"}},
		{name: "nine", fields: "Accept: 1\r\nUser-Agent: 2\r\nOrigin: 3\r\nReferer: 4\r\nCookie: 5\r\nX-Model: 6\r\nX-Api-Key: 7\r\nTe: 8\r\nUpgrade: 9\r\n"},
		{name: "a name twice", fields: "Accept: 1\r\nAccept: 2\r\n"},
		{name: "a name twice in two spellings", fields: "Accept: 1\r\naccept: 2\r\n"},
		{name: "another name", fields: "Accept: 1\r\nX-Other: 2\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := "POST / HTTP/1.1\r\nHost: x\r\n" + tc.fields + "\r\n"
			r := &http.Request{URL: &url.URL{}}
			var vals [16]string
			p, err := parseRequest(head, nil, r, vals[:], nil)
			if err != nil {
				t.Fatal(err)
			}
			got := listMap(p, vals[:])
			if tc.order == nil {
				if got != nil {
					t.Fatalf("a list %v for %q", got, tc.fields)
				}
				return
			}
			if got == nil || !maps.EqualFunc(got, r.Header, slices.Equal) {
				t.Fatalf("list %v, map %v", got, r.Header)
			}
			var names []string
			for c := p.codes; c != 0; c >>= 8 {
				names = append(names, internNames[c&0xff-1])
			}
			if strings.Join(names, ",") != strings.Join(tc.order, ",") {
				t.Fatalf("order %v, want %v", names, tc.order)
			}
		})
	}
}
