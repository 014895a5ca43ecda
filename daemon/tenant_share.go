package daemon

import (
	"context"
	"time"

	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/tenant"
	"github.com/sirupsen/logrus"
)

// shareInterval is how often the live replicas are counted for tenant
// limits. A replica's entry lives on a 10 s lease, so a stopped replica is
// still counted (its share unused: under-admission) for up to ~10 s, and a
// new one is counted by the others within its first announce plus this.
const shareInterval = time.Second

// shareTenantLimits makes this replica enforce 1/N of every tenant limit,
// N being the live replicas of the shared store, until ctx ends. Keys and
// buckets stay per replica (docs/tenants.md, "Several replicas"); with the
// store unreachable the last N is kept.
func shareTenantLimits(ctx context.Context, keys *tenant.Registry, b *etcdstore.Backend, log logrus.FieldLogger) {
	go func() {
		t := time.NewTicker(shareInterval)
		defer t.Stop()
		for {
			rctx, cancel := context.WithTimeout(ctx, shareInterval)
			reps, _, err := etcdstore.Replicas(rctx, b.Client(), b.Prefix())
			cancel()
			if err == nil {
				n := max(len(reps), 1)
				if old := keys.Share(); old != n {
					log.WithFields(logrus.Fields{"replicas": n, "was": old}).Info("daemon: tenant limits now shared by this many replicas")
					keys.SetShare(n)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// tenantKeysBlob is the shared store's document holding the key registry
// (<prefix>/tenant/apikeys) when --store etcd is used.
const tenantKeysBlob = "tenant/apikeys"

func closeBackend(b interface{ Close() error }) {
	if b != nil {
		_ = b.Close()
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
