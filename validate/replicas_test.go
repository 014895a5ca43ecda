package validate

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/sirupsen/logrus"
)

// TestReplicasStep: PASS while every announced replica serves one rule
// set, FAIL once one differs, SKIP without a store.
func TestReplicasStep(t *testing.T) {
	w := &workflow{opts: DefaultOptions()}
	var res StepResult
	w.replicas(context.Background(), &res)
	if res.Status != Skip {
		t.Fatalf("without --store: %s %s", res.Status, res.Summary)
	}
	c := etcdtest.Start(t, 1)
	w.opts.Store, w.opts.RequestTimeout = c.URL("/val"), 5*time.Second
	announce := func(id, digest string) *etcdstore.Backend {
		o := etcdstore.DefaultOptions()
		o.Endpoints, o.Prefix, o.HealthInterval = c.Endpoints(), "/val", 50*time.Millisecond
		b, err := etcdstore.Open(o, logrus.New(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		b.Announce(id, func() etcdstore.ReplicaInfo { return etcdstore.ReplicaInfo{API: id, Rules: 1, Digest: digest} })
		return b
	}
	check := func(want Status, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			res = StepResult{}
			w.replicas(context.Background(), &res)
			if res.Status == want && len(res.Evidence) == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("replicas step %s %q %v, want %s with %d replicas", res.Status, res.Summary, res.Evidence, want, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	announce("a", "d1")
	announce("b", "d1")
	check(Pass, 2)
	announce("c", "d2")
	check(Fail, 3)
}
