package pd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// testOptions has deadlines generous enough that a loaded CI box never trips
// them by accident; fault cases that need a deadline to fire use
// shortOptions. The test context bounds everything else.
func testOptions() pd.Options {
	o := pd.DefaultOptions()
	o.PrefillTimeout = 10 * time.Second
	o.DecodeTimeout = 10 * time.Second
	o.StreamIdleTimeout = 10 * time.Second
	l := logrus.New()
	l.SetOutput(io.Discard)
	o.Log = l
	return o
}

// shortOptions makes hangs and stalls end quickly.
func shortOptions() pd.Options {
	o := testOptions()
	o.PrefillTimeout = time.Second
	o.DecodeTimeout = time.Second
	o.StreamIdleTimeout = 300 * time.Millisecond
	return o
}

// fleet is a set of fake engines for one dialect: prefill A, prefill B (the
// alternative), decode; on distinct loopback IPs like distinct hosts.
type fleet struct {
	engine            spec.Engine
	prefill, alt, dec *pdfake.Engine
	rule              *spec.Rule
	ids               pd.EngineIDSource // learned engine ids handed to Serve (nil: none)
}

func fakeDialect(e spec.Engine) pdfake.Dialect {
	switch e {
	case spec.EngineSGLang:
		return pdfake.SGLang
	case spec.EngineTRTLLM:
		return pdfake.TRTLLM
	}
	return pdfake.VLLM
}

func startFleet(t *testing.T, engine spec.Engine) *fleet {
	t.Helper()
	d := fakeDialect(engine)
	try := func(addr string, role pdfake.Role, boot, nixl uint16) (*pdfake.Engine, error) {
		cfg := pdfake.DefaultConfig(d, role)
		cfg.Addr, cfg.BootstrapPort, cfg.NixlPort = addr, boot, nixl
		cfg.RendezvousTimeout = 10 * time.Second
		e, err := pdfake.Start(cfg)
		if err != nil {
			return nil, fmt.Errorf("start fake %s %s: %w", d, role, err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e, nil
	}
	start := func(addr string, role pdfake.Role, boot, nixl uint16) *pdfake.Engine {
		e, err := try(addr, role, boot, nixl)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	f := &fleet{engine: engine}
	// Same bootstrap port on another IP, as SGLang's rule-wide port demands.
	// The port is ephemeral on the first IP and may be taken on the second
	// by another test process: try a few ports.
	for attempt := 0; ; attempt++ {
		f.prefill = start("127.0.0.2:0", pdfake.Prefill, 0, 19001)
		alt, err := try("127.0.0.3:0", pdfake.Prefill, f.prefill.BootstrapPort(), 19002)
		if err == nil {
			f.alt = alt
			break
		}
		if attempt == 4 || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
		_ = f.prefill.Close()
	}
	f.dec = start("127.0.0.4:0", pdfake.Decode, 0, 19003)
	f.rule = &spec.Rule{Name: "rule-" + string(engine), Engine: engine,
		Key: spec.Key{ModelName: "m"}, PD: &spec.PD{BootstrapPort: f.prefill.BootstrapPort()}}
	return f
}

// result is what the client saw plus the Outcome Serve returned.
type result struct {
	stream  bool // the client asked to stream
	status  int
	header  http.Header
	body    string
	readErr error
	out     pd.Outcome
}

// do serves one request through d behind a real HTTP server and returns
// what the client saw. cancelAfter > 0 disconnects the client after reading
// up to that many body bytes; cancelAfter < 0 disconnects it as soon as the
// prefill and decode engines have both received their leg.
func (f *fleet) do(t *testing.T, d pd.Dialect, path, body string, pair pd.Pair, cancelAfter int) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sender := upstream.New(time.Second, 64, nil)
	defer sender.CloseIdle()
	outc := make(chan pd.Outcome, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &pd.Request{Path: r.URL.Path, Header: r.Header, Body: b, RequestID: "0123456789abcdef0123456789abcdef", Rule: f.rule, EngineIDs: f.ids}
		outc <- d.Serve(r.Context(), w, req, pair, sender)
	}))
	defer srv.Close()

	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	hreq, _ := http.NewRequestWithContext(cctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("X-Request-Id", "client-supplied-id")
	if cancelAfter < 0 {
		// Disconnect once both engines hold their leg.
		go func() {
			defer ccancel()
			wctx, wcancel := context.WithTimeout(cctx, 10*time.Second)
			defer wcancel()
			_ = f.prefill.WaitReceived(wctx, 1)
			_ = f.dec.WaitReceived(wctx, 1)
		}()
	}
	resp, err := srv.Client().Do(hreq)
	if err != nil {
		if cancelAfter < 0 {
			return result{out: <-outc, readErr: err}
		}
		t.Fatalf("client request: %v", err)
	}
	var res result
	res.stream = strings.Contains(body, `"stream":true`)
	res.status, res.header = resp.StatusCode, resp.Header
	if cancelAfter > 0 {
		buf := make([]byte, cancelAfter)
		n, _ := io.ReadAtLeast(resp.Body, buf, 1)
		res.body = string(buf[:n])
		ccancel()
	} else {
		b, err := io.ReadAll(resp.Body)
		res.body, res.readErr = string(b), err
	}
	resp.Body.Close()
	select {
	case res.out = <-outc:
	case <-ctx.Done():
		t.Fatalf("Serve did not return: %v", ctx.Err())
	}
	return res
}

// waitLegs waits until the engine has finished n requests (n < 0: however
// many it received).
func waitLegs(t *testing.T, e *pdfake.Engine, n int) []pdfake.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n < 0 {
		recs, err := e.WaitDone(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	recs, err := e.WaitDone(ctx, n)
	if err != nil {
		t.Fatalf("%v (have %d)", err, len(recs))
	}
	if len(recs) != n {
		t.Fatalf("engine %s got %d requests, want %d", e.AddrPort(), len(recs), n)
	}
	return recs
}

func mustDialect(t *testing.T, e spec.Engine) pd.Dialect {
	t.Helper()
	d, ok := pd.New(e, testOptions())
	if !ok {
		t.Fatalf("no dialect for %s", e)
	}
	return d
}
