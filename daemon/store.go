package daemon

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/sirupsen/logrus"
)

// openBackend picks the rule store's backend from --store: nil (the
// Store's own FileBackend in StateDir) or etcd, returned twice so the
// daemon can report this replica through it.
func openBackend(opts Options, m *metrics.Metrics, log *logrus.Logger) (store.Backend, *etcdstore.Backend, error) {
	if opts.Store == "" {
		return nil, nil, nil
	}
	if !etcdstore.IsURL(opts.Store) {
		return nil, nil, fmt.Errorf("daemon: --rs %q: want etcd://host:port[,host:port…][/prefix] (or leave it empty for the state dir)", opts.Store)
	}
	eo := opts.Etcd
	if err := eo.ParseURL(opts.Store); err != nil {
		return nil, nil, fmt.Errorf("daemon: --store: %w", err)
	}
	b, err := etcdstore.Open(eo, log.WithField("component", "rules"), m.Store)
	if err != nil {
		return nil, nil, fmt.Errorf("daemon: open etcd rule store: %w", err)
	}
	return b, b, nil
}

// replicaReportInterval is how often the store gauges are refreshed.
const replicaReportInterval = 500 * time.Millisecond

// reportReplica keeps the revision gauges current and announces this
// replica under <prefix>/replicas/ until ctx ends.
func reportReplica(ctx context.Context, rs *store.Store, b *etcdstore.Backend, opts Options, apiAddr string, m *metrics.Metrics) {
	id := opts.ReplicaID
	if id == "" {
		host, _ := os.Hostname()
		id = host + "/" + apiAddr
	}
	b.Announce(id, func() etcdstore.ReplicaInfo {
		return etcdstore.ReplicaInfo{API: apiAddr, Revision: rs.AppliedRevision(), Rules: len(rs.List()), Digest: rs.Digest()}
	})
	b.WatchEngines(func(change string) { m.Store.RegistrationChanges.WithLabelValues(change).Inc() })
	go func() {
		t := time.NewTicker(replicaReportInterval)
		defer t.Stop()
		for {
			applied := rs.AppliedRevision()
			m.Store.AppliedRevision.Set(float64(applied))
			m.Store.RevisionLag.Set(float64(max(0, b.SeenRevision()-applied)))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}
