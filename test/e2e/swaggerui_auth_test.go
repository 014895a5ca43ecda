package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

const swaggerTestToken = "swagger-ui-0123456789abcdef01234567"

// swaggerAuthPage drives the served Swagger UI the way "Authorize" and
// "Execute" do (specActions.execute is what the Execute button calls, and
// it applies the authorized security schemes): one call before authorizing,
// one after, and writes both statuses into the DOM for --dump-dom. It is
// served by the test on the API's origin, not by the product.
const swaggerAuthPage = `<!DOCTYPE html><html><head><meta charset="UTF-8"></head><body>
<div id="swagger-ui"></div><div id="result">pending</div>
<script src="/netlox/v1/docs/swagger-ui-bundle.js"></script>
<script>
var out = document.getElementById("result");
var errs = [];
window.onerror = function (msg) { errs.push("error: " + msg); };
window.onunhandledrejection = function (e) { errs.push("rejection: " + e.reason); };
var ticks = 0;
var respStatus = function (path) {
  var r = window.ui.specSelectors.responseFor(path, "get");
  return r ? r.get("status") : undefined;
};
// run is what the Execute button does for a GET without parameters.
var run = function (path) {
  var op = window.ui.specSelectors.specJson().getIn(["paths", path, "get"]);
  window.ui.specActions.execute({path: path, method: "get", operation: op});
};
var anon = "/config/loadbalancer/all", authed = "/config/ai/kv/inventory";
window.ui = SwaggerUIBundle({
  url: "/netlox/v1/swagger.json", dom_id: "#swagger-ui",
  onComplete: start
});
function start() {
    run(anon);
    var wait1 = setInterval(function () {
      ticks++;
      if (respStatus(anon) === undefined) { out.textContent = "pending " + ticks + " " + errs.join("; "); return; }
      clearInterval(wait1);
      window.ui.preauthorizeApiKey("bearerToken", "Bearer ` + swaggerTestToken + `");
      run(authed);
      var wait2 = setInterval(function () {
        if (respStatus(authed) === undefined) return;
        clearInterval(wait2);
        out.textContent = "anonymous=" + respStatus(anon) + " authorized=" + respStatus(authed);
      }, 50);
    }, 50);
}
</script></body></html>`

// TestSwaggerUIAuthorize: with a token file, the UI still loads (docs and
// swagger.json are public), a call without a token gets 401 and the same
// UI's call after Authorize gets 200 — "Try it out" works with a token.
func TestSwaggerUIAuthorize(t *testing.T) {
	browser := requireChromium(t)
	log := logrus.New()
	log.SetOutput(io.Discard)
	rs, err := store.Open(store.Options{StateDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("ro:"+swaggerTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	guard, err := auth.NewGuard(ln.Addr().String(), auth.Options{TokenFile: tokens})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts := api.DefaultOptions()
	opts.Store, opts.Log, opts.Guard = rs, log, guard
	opts.Metrics = &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", srv.Handler())
	mux.HandleFunc("/e2e/authorize.html", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, swaggerAuthPage)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
	})

	dom := dumpDOM(t, browser, "http://"+ln.Addr().String()+"/e2e/authorize.html")
	got := regexp.MustCompile(`anonymous=\d+ authorized=\d+`).FindString(dom)
	if got != "anonymous=401 authorized=200" {
		res := regexp.MustCompile(`<div id="result">[^<]*</div>`).FindString(dom)
		t.Fatalf("Swagger UI calls: %q, want anonymous=401 authorized=200 (%s)", got, res)
	}
}
