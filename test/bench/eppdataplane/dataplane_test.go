package eppdataplane

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/epp"
	"github.com/prometheus/client_golang/prometheus"
)

// fixedPicker picks a fixed list and keeps what the data plane reported.
type fixedPicker struct {
	res epp.Result
	err error

	mu       sync.Mutex
	outcomes []epp.Outcome
}

func (p *fixedPicker) Pick(context.Context, *epp.Request) (epp.Result, error) { return p.res, p.err }
func (p *fixedPicker) Served(o epp.Outcome) {
	p.mu.Lock()
	p.outcomes = append(p.outcomes, o)
	p.mu.Unlock()
}

func serveEPP(t *testing.T, p epp.Picker) string {
	t.Helper()
	srv, err := epp.New(epp.DefaultOptions(), p, epp.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	hlis, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, hlis) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String()
}

// serveFront serves a data plane in front of the EPP at eppAddr for the
// test's length and returns its URL.
func serveFront(t *testing.T, eppAddr string) string {
	t.Helper()
	dp, err := New(eppAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	front := httptest.NewServer(dp)
	t.Cleanup(front.Close)
	return front.URL
}

// A request goes to the first picked endpoint that takes the connection,
// with the picker's headers, body unchanged; the response streams back and
// the EPP hears the status, the endpoint that served and the end.
func TestDataPlaneFollowsThePick(t *testing.T) {
	var got struct {
		body, prefill, path string
	}
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.body, got.prefill, got.path = string(b), r.Header.Get("X-Prefiller-Host-Port"), r.URL.RequestURI()
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"x\":1}\n\ndata: [DONE]\n\n")
	}))
	defer engine.Close()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close() // refuses connections: the data plane falls back

	engineAddr := strings.TrimPrefix(engine.URL, "http://")
	p := &fixedPicker{res: epp.Result{Endpoints: []string{deadAddr, engineAddr}, Headers: map[string]string{"x-prefiller-host-port": "10.0.0.9:8000"}}}
	front := serveFront(t, serveEPP(t, p))

	resp, err := http.Post(front+"/v1/completions?x=1", "application/json", strings.NewReader(`{"prompt":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(out) != "data: {\"x\":1}\n\ndata: [DONE]\n\n" {
		t.Fatalf("client got %d %q", resp.StatusCode, out)
	}
	if got.body != `{"prompt":"hi"}` || got.prefill != "10.0.0.9:8000" || got.path != "/v1/completions?x=1" {
		t.Errorf("engine got %+v", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.outcomes)
		p.mu.Unlock()
		if n == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.outcomes) != 1 {
		t.Fatalf("%d outcomes reported, want 1", len(p.outcomes))
	}
	if o := p.outcomes[0]; o.Endpoint != engineAddr || o.Status != 200 || !o.Complete || o.Err != nil {
		t.Errorf("outcome %+v: want served by %s, 200, complete", o, engineAddr)
	}
}

// The EPP's refusal reaches the client with its status and reason.
func TestDataPlaneRelaysRefusal(t *testing.T) {
	front := serveFront(t, serveEPP(t, &fixedPicker{err: epp.Shed("queue_full")}))
	resp, err := http.Post(front+"/v1/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get(ReasonHeader) != "queue_full" {
		t.Errorf("client got %d reason %q, want 429 queue_full", resp.StatusCode, resp.Header.Get(ReasonHeader))
	}
}
