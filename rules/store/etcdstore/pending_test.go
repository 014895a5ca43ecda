package etcdstore_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/rules/store/storetest"
	"github.com/infergate/infergate/spec"
)

// refusingRuntime refuses rules on ports 81 and 82 (their VIP address is not
// up) until up is set.
type refusingRuntime struct {
	recordingRuntime
	up atomic.Bool
}

func (r *refusingRuntime) Install(prev, next *spec.Rule) error {
	if next.Key.Port >= 81 && !r.up.Load() {
		return apierror.Conflict(apierror.CodeBindFailed, "", "", "cannot assign requested address")
	}
	return r.recordingRuntime.Install(prev, next)
}

// TestReplicaRetriesARuleItCannotBindYet: in etcd mode a replica that
// cannot bind a rule (at replay, or when it arrives through the watch)
// keeps it, reports it not served with the reason, and serves it once the
// address is up, without a restart or a re-write.
func TestReplicaRetriesARuleItCannotBindYet(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	put(t, cli, "/pending/rules/"+storetest.Key(81), string(storetest.Value(t, 81))) // before boot
	rt := &refusingRuntime{}
	o := store.DefaultOptions()
	o.Backend = openBackend(t, c.Endpoints(), "/pending")
	o.Runtime = rt
	o.Log = quietLog()
	o.ReplayInstallAttempts = 2
	o.ReplayRetryDelay = 5 * time.Millisecond
	o.MaxInstallRetryDelay = 20 * time.Millisecond
	s, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Replay(t.Context()); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get("10.0.0.10", 81, "tcp")
	if err != nil || !strings.Contains(e.InstallError, "cannot assign requested address") {
		t.Fatalf("rule refused at replay: %+v %v; want it kept with the reason", e, err)
	}
	// Another one arrives through the watch while the address is still down.
	put(t, cli, "/pending/rules/"+storetest.Key(82), string(storetest.Value(t, 82)))
	eventually(t, 5*time.Second, "the watched rule to be kept pending", func() bool { return s.Pending() == 2 })
	if rt.servingCount() != 0 {
		t.Fatalf("serving %d rules while the address is down", rt.servingCount())
	}
	rt.up.Store(true)
	eventually(t, 5*time.Second, "both rules to be served once the address is up", func() bool {
		return s.Pending() == 0 && rt.servingCount() == 2
	})
}
