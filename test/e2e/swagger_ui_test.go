package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// TestSwaggerUIRenders serves the real API handler on loopback, opens
// /netlox/v1/docs in headless chromium and checks Swagger UI rendered our
// operations from the embedded assets and our swagger.json (no network).
func TestSwaggerUIRenders(t *testing.T) {
	browser := requireChromium(t)

	log := logrus.New()
	log.SetOutput(io.Discard)
	rs, err := store.Open(store.Options{StateDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		t.Fatalf("replay: %v", err)
	}
	reg := prometheus.NewRegistry()
	opts := api.DefaultOptions()
	opts.Store = rs
	opts.Metrics = &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
	opts.Log = log
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatalf("api server: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		if err := <-done; err != nil && err != http.ErrServerClosed {
			t.Errorf("serve: %v", err)
		}
	})

	dom := dumpDOM(t, browser, "http://"+ln.Addr().String()+"/netlox/v1/docs")

	for _, want := range []string{
		`class="swagger-ui"`,
		"infergate management API",         // info.title from our document
		"opblock-post",                     // a rendered POST operation
		"opblock-delete",                   // a rendered DELETE operation
		"/config/loadbalancer",             // our paths
		"/config/loadbalancer/name/{name}", // a templated path
		"LoadbalanceEntry",                 // a reflected model in the Models section
		"btn authorize",                    // securityDefinitions give the Authorize button
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %q", want)
		}
	}
	if n := strings.Count(dom, `class="opblock `); n < 13 {
		t.Errorf("rendered %d operations, want at least 13", n)
	}
	if t.Failed() {
		t.Logf("DOM (first 3000 bytes):\n%.3000s", dom)
	}
}
