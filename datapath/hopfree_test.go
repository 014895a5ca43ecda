package datapath

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// hopRespCases are engine answers for TestHopFieldsNeverCross, chosen by
// the request's query (?r=N): each but the first carries a hop-by-hop
// field, in some spelling, whose value or named field holds "s3cret".
var hopRespCases = []struct {
	name, fields string
	chunked      bool
}{
	{name: "none", fields: "X-Kept: yes\r\n"},
	{name: "connection naming a field", fields: "connection: x-s3cret\r\nx-s3cret: 1\r\n"},
	// The strip then drops the client's id too, which the relay sets again
	// (only a stripped header can have lost it).
	{name: "connection naming the request id", fields: "Connection: X-Request-Id\r\nX-Request-Id: engine-s3cret\r\n"},
	{name: "Connection twice, mixed case", fields: "Connection: keep-alive\r\nCONNECTION: X-S3cret\r\nX-S3cret: 1\r\n"},
	{name: "keep-alive", fields: "keep-alive: timeout=5, s3cret=1\r\n"},
	{name: "Te", fields: "Te: s3cret\r\n"},
	{name: "TE", fields: "TE: s3cret\r\n"},
	{name: "trailer", fields: "trailer: s3cret\r\n"},
	{name: "Upgrade", fields: "Upgrade: s3cret\r\n"},
	{name: "Proxy-Connection", fields: "Proxy-Connection: s3cret\r\n"},
	{name: "proxy-authenticate", fields: "proxy-authenticate: s3cret\r\n"},
	{name: "Expect", fields: "Expect: s3cret\r\n"},
	{name: "transfer-encoding", fields: "transfer-encoding: chunked\r\n", chunked: true},
}

// rawHopEngine is a raw HTTP/1.1 engine that records each request head as
// it came off the wire and answers with hopRespCases[r] (?r=N in the
// target).
func rawHopEngine(t *testing.T) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var heads []string
	addr := serveRaw(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readRawHead(br)
			if err != nil {
				return
			}
			mu.Lock()
			heads = append(heads, head)
			mu.Unlock()
			req, err := http.ReadRequest(bufio.NewReader(io.MultiReader(strings.NewReader(head), br)))
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			rc := hopRespCases[0]
			if n, err := strconv.Atoi(req.URL.Query().Get("r")); err == nil {
				rc = hopRespCases[n]
			}
			answer := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + rc.fields
			if rc.chunked {
				answer += "\r\n2\r\n{}\r\n0\r\n\r\n"
			} else {
				answer += "Content-Length: 2\r\n\r\n{}"
			}
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
	return addr, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), heads...)
	}
}

// readRawHead reads one message head, through its empty line, as sent.
func readRawHead(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		b.WriteString(l)
		if l == "\r\n" || l == "\n" {
			return b.String(), nil
		}
	}
}

// TestHopFieldsNeverCross: on both plaintext front ends, a hop-by-hop
// field in any spelling (or one a Connection field names) in a client's
// request never reaches the engine, and in an engine's answer never
// reaches the client, whether or not the parser let the proxy skip
// hop.Strip. A request or answer with none keeps its end-to-end fields.
func TestHopFieldsNeverCross(t *testing.T) {
	reqCases := []struct {
		name, fields string
		absent       string // a lower-case field line start the engine must not see ("" : only "s3cret")
	}{
		{name: "none", fields: "X-Kept: yes\r\n"},
		{name: "connection naming a field", fields: "connection: x-s3cret\r\nx-s3cret: 1\r\n"},
		{name: "Connection twice, mixed case", fields: "CoNNection: keep-alive\r\nConnection: X-S3cret\r\nX-S3cret: 1\r\n"},
		{name: "te", fields: "te: s3cret\r\n"},
		{name: "TE", fields: "TE: s3cret\r\n"},
		{name: "KEEP-ALIVE", fields: "KEEP-ALIVE: s3cret\r\n"},
		{name: "proxy-connection", fields: "proxy-connection: s3cret\r\n"},
		{name: "Proxy-Authorization", fields: "Proxy-Authorization: s3cret\r\n"},
		{name: "upgrade", fields: "upgrade: s3cret\r\n"},
		{name: "Trailer", fields: "Trailer: s3cret\r\n"},
		{name: "expect", fields: "expect: 100-continue\r\n", absent: "expect:"},
	}
	for _, fe := range []string{FrontEndLean, FrontEndNetHTTP} {
		t.Run(fe, func(t *testing.T) {
			o := testOptions()
			o.HTTPFrontEnd = fe
			rt := New(o, metrics.NewDatapath(prometheus.NewRegistry()), nil)
			closeAtEnd(t, rt)
			addr, heads := rawHopEngine(t)
			r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, addr, 1))
			if err := rt.Install(nil, r); err != nil {
				t.Fatal(err)
			}
			gw := r.Key.ListenAddr().String()
			for _, tc := range reqCases {
				t.Run("request/"+tc.name, func(t *testing.T) {
					before := len(heads())
					head, _ := hopExchange(t, gw, "", tc.fields)
					if !strings.HasPrefix(head, "HTTP/1.1 200") {
						t.Fatalf("answer %q", head)
					}
					hs := heads()
					if len(hs) != before+1 {
						t.Fatalf("engine saw %d requests, want 1", len(hs)-before)
					}
					got := strings.ToLower(hs[before])
					if strings.Contains(got, "s3cret") || tc.absent != "" && strings.Contains(got, "\n"+tc.absent) {
						t.Fatalf("engine received a hop-by-hop field: %q", hs[before])
					}
					if tc.name == "none" && !strings.Contains(got, "\nx-kept: yes\r\n") {
						t.Fatalf("engine lost an end-to-end field: %q", hs[before])
					}
				})
			}
			for i, rc := range hopRespCases {
				t.Run("answer/"+rc.name, func(t *testing.T) {
					head, body := hopExchange(t, gw, "?r="+strconv.Itoa(i), "")
					lower := strings.ToLower(head)
					if !strings.HasPrefix(head, "HTTP/1.1 200") || body != "{}" {
						t.Fatalf("answer %q %q", head, body)
					}
					if strings.Contains(lower, "s3cret") || strings.Count(lower, "\ntransfer-encoding:") > 1 {
						t.Fatalf("client received a hop-by-hop field: %q", head)
					}
					if !strings.Contains(lower, "\nx-request-id: ") {
						t.Fatalf("answer lost its request id: %q", head)
					}
					if rc.name == "none" && !strings.Contains(lower, "\nx-kept: yes\r\n") {
						t.Fatalf("client lost an end-to-end field: %q", head)
					}
				})
			}
		})
	}
}

// hopExchange sends one completion request with the extra field lines to
// the gateway on a connection of its own and returns the final answer's
// head as it came off the wire (interim 1xx heads skipped) and its body.
func hopExchange(t *testing.T, gw, query, fields string) (string, string) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", gw, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	req := "POST /v1/completions" + query + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + fields +
		"Content-Length: " + strconv.Itoa(len(completionBody)) + "\r\n\r\n" + completionBody
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	for {
		head, err := readRawHead(br)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(head, "HTTP/1.1 1") {
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(head), br)), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return head, string(b)
	}
}
