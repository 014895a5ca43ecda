package datapath

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tlsmat/tlstest"
)

// heldEngine answers every request with a small JSON body once released,
// and records how many connections it holds open at most.
type heldEngine struct {
	addr     string
	release  chan struct{}
	inFlight atomic.Int64
	open     atomic.Int64
	maxOpen  atomic.Int64
	accepted atomic.Int64
}

func startHeldEngine(t *testing.T) *heldEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &heldEngine{addr: ln.Addr().String(), release: make(chan struct{})}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			e.inFlight.Add(1)
			defer e.inFlight.Add(-1)
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-e.release:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				e.accepted.Add(1)
				n := e.open.Add(1)
				for m := e.maxOpen.Load(); n > m && !e.maxOpen.CompareAndSwap(m, n); m = e.maxOpen.Load() {
				}
			case http.StateClosed, http.StateHijacked:
				e.open.Add(-1)
			}
		},
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

// h2From is an HTTP/2 client that trusts ca and connects from the local
// address src (so per-address caps can be told apart on loopback). It
// keeps to one connection once it has one: requests beyond the server's
// stream limit wait for a stream instead of dialing more.
func h2From(ca *tlstest.CA, src, serverName string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), ServerName: serverName},
		ForceAttemptHTTP2: true,
		DialContext:       d.DialContext,
		HTTP2:             &http.HTTP2Config{StrictMaxConcurrentRequests: true},
	}}
}

// TestH2StreamsHeldToCaps: HTTP/2 streams count in admission and engine
// connections are capped per endpoint. A client that opens many more
// streams than the caps over a handful of connections gets the cap's worth
// served (429 for the rest, counted), never opens more engine sockets than
// the per-endpoint cap, and leaves room for a good client on another VIP.
func TestH2StreamsHeldToCaps(t *testing.T) {
	const (
		engineCap    = 6   // --max-engine-conns-per-endpoint
		perIPCap     = 30  // --max-inflight-requests-per-ip
		streamsPerC  = 50  // --max-streams-per-conn
		attackConns  = 4   // client connections of the attacker
		attackStream = 200 // concurrent streams it opens on them
	)
	ca := tlstest.NewCA(t, "infergate-test-root")
	root := t.TempDir()
	ca.Issue(t, tlstest.LeafOptions{CommonName: "default-cert", DNSNames: []string{"localhost"}}).WriteDir(t, root, nil)
	o := testOptions()
	o.TLS.CertRoot = root
	// Connection caps wide (net/http's client may open a connection per
	// waiting request); the request caps are what is under test.
	o.Admission.MaxConns = 512
	o.Admission.MaxConnsPerIP = 512
	o.Admission.MaxRequests = 40
	o.Admission.MaxRequestsPerIP = perIPCap
	o.Admission.MaxStreamsPerConn = streamsPerC
	o.Upstream.MaxConnsPerEndpoint = engineCap
	m := metrics.New()
	rt := NewWithMetrics(o, m, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})

	hot, cold := startHeldEngine(t), startHeldEngine(t)
	close(cold.release)
	hotRule := tlsRule(freePort(t), "", epFor(t, hot.addr, 1))
	coldRule := tlsRule(freePort(t), "", epFor(t, cold.addr, 1))
	coldRule.Name = "tls-cold"
	for _, r := range []*spec.Rule{hotRule, coldRule} {
		if err := rt.Install(nil, r); err != nil {
			t.Fatal(err)
		}
	}

	// The attacker's connections, each opened by a request the gateway
	// refuses itself, so the streams below share them instead of dialing.
	var attackers []*http.Client
	for range attackConns {
		c := h2From(ca, "127.0.0.2", "localhost")
		warm, err := c.Get(httpsURL(hotRule, "/v1/models/../admin"))
		if err != nil {
			t.Fatal(err)
		}
		warm.Body.Close()
		if warm.ProtoMajor != 2 {
			t.Fatalf("attacker connection speaks %s", warm.Proto)
		}
		attackers = append(attackers, c)
	}
	statuses := make(chan int, attackStream)
	var codesMu sync.Mutex
	codes := map[string]int{} // gateway error codes of the refusals, for the failure message
	var wg sync.WaitGroup
	for i := range attackStream {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := attackers[i%attackConns].Post(httpsURL(hotRule, "/v1/completions"), "application/json", strings.NewReader(completionBody))
			if err != nil {
				t.Log(err)
				statuses <- -1
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 {
				statuses <- -2
				return
			}
			if code := resp.Header.Get(HeaderError); code != "" {
				codesMu.Lock()
				codes[strconv.Itoa(resp.StatusCode)+" "+code]++
				codesMu.Unlock()
			}
			statuses <- resp.StatusCode
		}()
	}
	// The per-address cap is held by waiting streams; the engine holds
	// only the per-endpoint cap's worth of them.
	waitFor(t, 10*time.Second, "the attacker's streams to fill the per-address cap", func() bool {
		return rt.gate.InFlight() == perIPCap && hot.inFlight.Load() == engineCap
	})

	// A good client from another address is served on another VIP meanwhile.
	good := h2From(ca, "127.0.0.3", "localhost")
	for range 5 {
		resp, err := good.Post(httpsURL(coldRule, "/v1/completions"), "application/json", strings.NewReader(completionBody))
		if err != nil {
			t.Fatalf("good client on another VIP: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("good client on another VIP: %d %s", resp.StatusCode, b)
		}
	}

	close(hot.release)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	refused := counterSum(t, m.Registry, "infergate_edge_requests_refused_total", map[string]string{"reason": metrics.RefusedPerIP})
	if count[200] < perIPCap || count[200]+count[429] != attackStream || float64(count[429]) != refused {
		t.Fatalf("attacker statuses %v, error codes %v (refusals counted %v): want ≥ %d × 200, the rest 429, each refusal counted", count, codes, refused, perIPCap)
	}
	if n := hot.maxOpen.Load(); n > engineCap {
		t.Fatalf("the engine held %d connections at once, cap %d", n, engineCap)
	}
	if n := hot.accepted.Load(); n > engineCap {
		t.Fatalf("the engine accepted %d connections in all, cap %d (idle ones are reused)", n, engineCap)
	}
	if n := rt.gate.InFlight(); n != 0 {
		t.Fatalf("%d requests still counted in flight after every answer", n)
	}
}
