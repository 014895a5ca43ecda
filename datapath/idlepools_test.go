package datapath

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// TestDeletedRuleReleasesEngineSockets: once a rule is deleted and no other
// rule names its engine, the engine sees the gateway's keep-alive
// connections closed at once, not when an idle timeout finally fires.
func TestDeletedRuleReleasesEngineSockets(t *testing.T) {
	var open atomic.Int64
	eng := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	eng.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	eng.Start()
	defer eng.Close()
	o := testOptions()
	o.UpstreamIdleTimeout = time.Hour // only the deletion may close them
	rt, _ := newTestRuntime(t, o)
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, eng.Listener.Addr().String(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	for range 3 {
		if res := post(t, c, ruleURL(r)+"/v1/completions", `{"model":"m","prompt":"x"}`); res.status != 200 {
			t.Fatalf("status %d: %s", res.status, res.body)
		}
	}
	if open.Load() == 0 {
		t.Fatal("no engine connection was kept alive")
	}
	rt.Remove(r)
	for deadline := time.Now().Add(5 * time.Second); open.Load() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d engine connections still open after the rule was deleted", open.Load())
		}
	}
}
