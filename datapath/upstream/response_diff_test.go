package upstream

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/infergate/infergate/datapath/hop"
)

// headPieces are the bits of engine response heads, good and hostile:
// status lines, interned names in both spellings and odd ones, framing
// fields that conflict, stray CR and LF, bad name bytes, a bare-LF end.
var headPieces = []string{
	"HTTP/1.1 200 OK\r\n", "HTTP/1.0 200 OK\r\n", "HTTP/1.1 204 No Content\r\n", "HTTP/1.1 100 Continue\r\n",
	"HTTP/1.1 2x0 OK\r\n", "HTTP/1.1 503\r\n", "HTTP/1.1 200OK\r\n", "\r\n", "\n", "\r", "HTTP/1.1 304 Not Modified\n",
	"Content-Length: 2\r\n", "content-length: 2\r\n", "CONTENT-LENGTH: 3\r\n", "Content-Length: -1\r\n", "Content-Length: x\r\n",
	"Transfer-Encoding: chunked\r\n", "transfer-encoding: Chunked\r\n", "Transfer-Encoding: gzip\r\n",
	"Connection: close\r\n", "connection: keep-alive\r\n", "CoNNection: Close\r\n",
	"Content-Type: application/json\r\n", "content-type: text/event-stream\r\n", "Date: x\r\n", "date: y\n",
	"X-Request-Id: engine\r\n", "x-request-id: e2\r\n", "X-REQUEST-ID: e3\r\n", "X-Fake-Engine: f\r\n", "x-odd_name: \t v \t\r\n",
	"Vary: a\r\n", "vary: b\r\n", "no colon\r\n", ": empty name\r\n", "a b: v\r\n", "K:\r\n", "K: v\r\r\n", "K: a\rb\r\n",
	"Server: uvicorn\r\n", "Keep-Alive: timeout=5\r\n", "Cache-Control: no-cache\r\n", "Content-Encoding: br\r\n",
	"Trailer: X\r\n", "X-Accel-Buffering: no\r\n", "H1: 1\r\n", "H2: 2\r\n", "H3: 3\r\n", "H4: 4\r\n", "H5: 5\r\n",
}

// headBodies follow a head: bodies framed every way, cut short, and the
// next response on the connection.
var headBodies = []string{
	"", "ok", "abc", "2\r\nok\r\n0\r\n\r\n", "2\r\nok\r\n0\r\nX-T: 1\r\n\r\n", "5\r\nab",
	"HTTP/1.1 204 No Content\r\n\r\n",
}

// TestReadResponseDifferential checks the parser against the one it
// replaced (oldresponse_test.go) on heads built from headPieces (seeded,
// so a failure repeats), read whole from the buffer and line by line
// (through a buffer too small for the head, and one byte per read).
func TestReadResponseDifferential(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	for i := range 20000 {
		var sb strings.Builder
		if rng.IntN(8) != 0 {
			sb.WriteString(headPieces[rng.IntN(5)]) // a status line first, mostly
		}
		for range rng.IntN(12) {
			sb.WriteString(headPieces[rng.IntN(len(headPieces))])
		}
		if rng.IntN(8) != 0 {
			sb.WriteString([]string{"\r\n", "\n"}[rng.IntN(2)])
		}
		sb.WriteString(headBodies[rng.IntN(len(headBodies))])
		compareReadResponse(t, fmt.Sprint("case ", i), sb.String(), []string{http.MethodPost, http.MethodHead}[rng.IntN(2)])
		if t.Failed() {
			return
		}
	}
}

// FuzzReadResponse is TestReadResponseDifferential on any bytes.
func FuzzReadResponse(f *testing.F) {
	for _, p := range headPieces {
		f.Add("HTTP/1.1 200 OK\r\n" + p + "Content-Length: 2\r\n\r\nok")
	}
	f.Add("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
	f.Fuzz(func(t *testing.T, raw string) {
		compareReadResponse(t, "fuzz", raw, http.MethodPost)
	})
}

// compareReadResponse parses raw with both parsers, with and without a
// client header map, through each reader, and fails on any difference.
func compareReadResponse(t *testing.T, name, raw, method string) {
	t.Helper()
	readers := []struct {
		name string
		br   func() *bufio.Reader
	}{
		{"whole", func() *bufio.Reader { return bufio.NewReader(strings.NewReader(raw)) }},
		{"16-byte buffer", func() *bufio.Reader { return bufio.NewReaderSize(strings.NewReader(raw), 16) }},
		{"byte by byte", func() *bufio.Reader { return bufio.NewReader(iotest.OneByteReader(strings.NewReader(raw))) }},
	}
	for _, into := range []bool{false, true} {
		var want string
		for k, r := range readers {
			got := [3]string{}
			for j, parse := range []func(*response, *bufio.Reader, string, http.Header) (io.Reader, error){oldReadResponseInto, readResponseInto, fieldsAsInto} {
				var h http.Header
				if into {
					h = http.Header{headerRequestID: {"rid"}}
				}
				got[j] = parseOutcome(parse, r.br(), method, h)
			}
			if got[0] != got[1] {
				t.Errorf("%s, %s, into %v: %q\nold: %s\nnew: %s", name, r.name, into, raw, got[0], got[1])
				return
			}
			if got[0] != got[2] {
				t.Errorf("%s, %s, into %v: %q\nold: %s\nas pairs: %s", name, r.name, into, raw, got[0], got[2])
				return
			}
			// The line path's buffer may end a head the whole buffer
			// holds differently only in a line's length bound.
			if k == 0 {
				want = got[1]
			} else if r.name == "byte by byte" && got[1] != want {
				t.Errorf("%s, into %v: %q\nwhole: %s\nbyte by byte: %s", name, into, raw, want, got[1])
				return
			}
		}
	}
}

// fieldsAsInto is readResponseFields (Leg.Fields) seen as readResponseInto:
// when it gives pairs, they are added to h afterwards, so a head's
// outcome must be the map parse's; and the pairs must keep Fields'
// promises (h untouched, no engine id, no hop field, one Content-Length
// at most, names valid and as the map's keys). Without h, as
// readResponseInto (Fields needs Into).
func fieldsAsInto(ur *response, br *bufio.Reader, method string, h http.Header) (io.Reader, error) {
	if h == nil {
		return readResponseInto(ur, br, method, h)
	}
	before := h.Clone()
	body, err := readResponseFields(ur, br, method, h)
	kv := ur.body.fields
	if err != nil || kv == nil {
		return body, err
	}
	if !reflect.DeepEqual(before, h) {
		return nil, fmt.Errorf("pairs given, but the map changed: %v", h)
	}
	if len(kv)%2 != 0 || cap(kv)-len(kv) < 2 {
		return nil, fmt.Errorf("pairs %q: odd, or no room for two more", kv)
	}
	lengths := 0
	for i := 0; i < len(kv); i += 2 {
		k := kv[i]
		if k == headerContentLength {
			lengths++
		}
		if k == headerRequestID || hop.IsHeader(k) || lengths > 1 || !validHeaderKey(k) ||
			textproto.CanonicalMIMEHeaderKey(k) != k {
			return nil, fmt.Errorf("pairs %q: field %q may not be among them", kv, k)
		}
		h[k] = append(h[k], kv[i+1])
	}
	return body, nil
}

// parseOutcome is everything a caller can see of one parse: the error, or
// the response's fields, its body and its error, and what br still holds.
func parseOutcome(parse func(*response, *bufio.Reader, string, http.Header) (io.Reader, error), br *bufio.Reader, method string, h http.Header) string {
	ur := new(response)
	body, err := parse(ur, br, method, h)
	if err != nil {
		return "error: " + err.Error()
	}
	r := &ur.resp
	if h != nil && !reflect.DeepEqual(h, r.Header) {
		return "the response's header is not the map passed in"
	}
	b, berr := io.ReadAll(body)
	rest, _ := io.ReadAll(br)
	return fmt.Sprintf("status %q %d proto %q %d.%d header %s cl %d close %v te %v body %q %v rest %q",
		r.Status, r.StatusCode, r.Proto, r.ProtoMajor, r.ProtoMinor, sortedHeader(r.Header),
		r.ContentLength, r.Close, r.TransferEncoding, b, berr, rest)
}

// sortedHeader prints h in key order, values quoted as they are.
func sortedHeader(h http.Header) string {
	keys := slices.Sorted(maps.Keys(h))
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%q=%q ", k, h[k])
	}
	return sb.String()
}

// TestParseLength: parseLength reads every string as strconv.ParseInt
// does, its own loop or not.
func TestParseLength(t *testing.T) {
	for _, s := range []string{
		"0", "2", "212", "007", "999999999999999999", "1000000000000000000", "9223372036854775807",
		"9223372036854775808", "", "+2", "-0", "-1", "2 ", " 2", "0x10", "1_000", "a", "2/", ":",
	} {
		n, err := parseLength(s)
		wn, werr := strconv.ParseInt(s, 10, 64)
		if n != wn || (err == nil) != (werr == nil) {
			t.Errorf("parseLength(%q) = %d, %v; ParseInt: %d, %v", s, n, err, wn, werr)
		}
	}
}
