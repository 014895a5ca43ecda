package daemon

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testport"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(25 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestEtcdStoreDaemon: two in-process daemons on loopback share one etcd
// (--store etcd://…). A rule written through one reaches the other, which
// cannot bind the same VIP:port on this host and counts the refusal; with
// etcd killed, /readyz says degraded and writes get 503 store_unavailable with
// Retry-After; restarted, writes succeed again.
func TestEtcdStoreDaemon(t *testing.T) {
	c := etcdtest.Start(t, 1)
	log, _ := testLogger()
	opts := DefaultOptions()
	opts.StateDir = t.TempDir()
	opts.Store = c.URL("/daemon")
	opts.ReplicaID = "a"
	a := start(t, opts, log)
	if st, b := get(t, a.base+"/readyz"); st != 200 || !strings.Contains(b, `"ready"`) {
		t.Fatalf("readyz %d %s", st, b)
	}
	// Registration churn is counted: one engine appears, then leaves.
	eo := etcdstore.DefaultOptions()
	eo.Endpoints, eo.Prefix = c.Endpoints(), "/daemon"
	rb, err := etcdstore.Open(eo, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	rctx, rcancel := context.WithCancel(context.Background())
	rdone := make(chan error, 1)
	go func() {
		rdone <- rb.Register(rctx, etcdstore.Registration{URL: "http://127.0.0.81:8000", Role: "decode", Engine: "vllm", Model: "m"}, 5*time.Second, nil)
	}()
	waitFor(t, "the registration to be counted", func() bool {
		_, m := get(t, a.base+"/metrics")
		return strings.Contains(m, `infergate_store_registration_changes_total{change="added"} 1`)
	})
	rcancel()
	<-rdone
	waitFor(t, "the deregistration to be counted", func() bool {
		_, m := get(t, a.base+"/metrics")
		return strings.Contains(m, `infergate_store_registration_changes_total{change="removed"} 1`)
	})
	post := func(base, body string) (int, http.Header, string) {
		resp, err := http.Post(base+"/netlox/v1/config/loadbalancer", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	if st, _, b := post(a.base, restRule(testport.Free(t))); st != 200 {
		t.Fatalf("POST: %d %s", st, b)
	}
	// A second replica on the same etcd sees the rule. Both run in one
	// network namespace here, so the second cannot bind the same VIP:port
	// (the netns e2e test runs replicas as separate hosts): it refuses the
	// rule at install and counts it, and the rule stays in etcd.
	opts.StateDir, opts.ReplicaID = t.TempDir(), "b"
	b := start(t, opts, log)
	waitFor(t, "replica b to count the rule it cannot bind", func() bool {
		_, m := get(t, b.base+"/metrics")
		return strings.Contains(m, `infergate_store_rejected_values_total{reason="install_failed"} 1`)
	})
	if n := len(listRules(t, a.base).LbAttr); n != 1 {
		t.Fatalf("replica a lists %d rules", n)
	}

	c.Members[0].Kill()
	waitFor(t, "readyz to say degraded", func() bool {
		st, body := get(t, a.base+"/readyz")
		return st == 200 && strings.Contains(body, "degraded: store unreachable")
	})
	st, h, body := post(a.base, restRule(testport.Free(t)))
	if st != 503 || !strings.Contains(body, "store_unavailable") || h.Get("Retry-After") == "" {
		t.Fatalf("write during the outage: %d %s Retry-After=%q", st, body, h.Get("Retry-After"))
	}
	if n := len(listRules(t, a.base).LbAttr); n != 1 {
		t.Fatalf("during the outage replica a lists %d rules, want 1", n)
	}
	if err := c.Members[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "readyz ready again", func() bool {
		_, body := get(t, a.base+"/readyz")
		return strings.Contains(body, `"ready"`)
	})
	if st, _, b := post(a.base, restRule(testport.Free(t))); st != 200 {
		t.Fatalf("write after recovery: %d %s", st, b)
	}
}
