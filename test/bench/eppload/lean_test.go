package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/test/extprocclient"
)

// refusingPicker refuses bodies of one size with 503 and picks the rest.
type refusingPicker struct {
	refuse int
	res    epp.Result
}

func (p refusingPicker) Pick(_ context.Context, r *epp.Request) (epp.Result, error) {
	if len(r.Body) == p.refuse {
		return epp.Result{}, epp.Unavailable("test_refusal")
	}
	return p.res, nil
}

func (refusingPicker) Served(epp.Outcome) {}

// serveEPP runs the real ext_proc server on loopback until the test ends.
func serveEPP(t *testing.T, p epp.Picker) string {
	t.Helper()
	s, err := epp.New(epp.DefaultOptions(), p, nil)
	if err != nil {
		t.Fatal(err)
	}
	var lis [2]net.Listener
	for i := range lis {
		if lis[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis[0], lis[1]) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return lis[0].Addr().String()
}

// The lean driver runs whole streams against the real server: bodies
// across frame sizes and past the EPP's 1 MiB stream window (so it waits
// for window updates), a refusal, many streams on one connection (past
// the EPP's 16 MiB connection window), and a small receive window of its
// own (so it hands the EPP window back).
func TestLeanDriverExchanges(t *testing.T) {
	const refused = 777
	addr := serveEPP(t, refusingPicker{refuse: refused, res: epp.Result{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}}})
	cases := []struct {
		name       string
		window     int
		sizes      []int
		wantStatus int
	}{
		{"no body", 256 << 20, []int{0}, 0},
		{"one frame", 256 << 20, []int{8 << 10}, 0},
		{"several chunks and frames", 256 << 20, []int{100 << 10}, 0},
		{"past the stream window", 256 << 20, []int{3 << 20}, 0},
		{"refused", 256 << 20, []int{refused}, 503},
		{"past the connection window", 256 << 20, repeat(600, 32<<10), 0},
		{"own window handed back", 1 << 17, repeat(20, 100<<10), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := dialLean(addr, tc.window)
			if err != nil {
				t.Fatal(err)
			}
			defer l.close()
			if err := l.conn.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
				t.Fatal(err)
			}
			for i, size := range tc.sizes {
				lat, status, err := l.exchange(leanRequest(i, size))
				if err != nil {
					t.Fatalf("stream %d (%d B): %v", i, size, err)
				}
				if status != tc.wantStatus || lat <= 0 {
					t.Fatalf("stream %d (%d B): status %d, latency %v; want status %d", i, size, status, lat, tc.wantStatus)
				}
			}
		})
	}
}

func repeat(n, size int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = size
	}
	return out
}

func leanRequest(i, size int) extprocclient.Request {
	body := make([]byte, size)
	for j := range body {
		body[j] = 'a' + byte((i+j)%26)
	}
	return extprocclient.Request{Body: body, Headers: extprocclient.Headers(
		":method", "POST", ":path", "/v1/completions", ":authority", "gw.example",
		"content-length", strconv.Itoa(size), "x-request-id", fmt.Sprint(i))}
}

// Both drivers refuse a pick without a destination or whose header and
// metadata name different endpoints.
func TestCheckPick(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    extprocclient.Pick
		ok   bool
	}{
		{"agree", extprocclient.Pick{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, Metadata: "10.0.0.1:8000,10.0.0.2:8000"}, true},
		{"no destination", extprocclient.Pick{}, false},
		{"metadata names another", extprocclient.Pick{Endpoints: []string{"10.0.0.1:8000"}, Metadata: "10.0.0.2:8000"}, false},
		{"metadata missing", extprocclient.Pick{Endpoints: []string{"10.0.0.1:8000"}}, false},
	} {
		if err := checkPick(tc.p); (err == nil) != tc.ok {
			t.Errorf("%s: checkPick = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
