package cli

import (
	"github.com/infergate/infergate/daemon"
	"github.com/spf13/pflag"
)

// addStoreFlags adds the shared rule store (etcd) flags of `serve`.
func addStoreFlags(fl *pflag.FlagSet, opts *daemon.Options) {
	e := &opts.Etcd
	fl.StringVar(&opts.Store, "store", opts.Store, "rule store: empty keeps rules.json in --state-dir; etcd://h1:2379,h2:2379/prefix (etcds:// for TLS) shares rules with every replica on that etcd")
	fl.StringVar(&opts.ReplicaID, "replica-id", opts.ReplicaID, "this replica's name in 'infergate get replicas' (default <hostname>/<API address>)")
	etcdClientFlags(fl, e)
	fl.StringVar(&e.TLS.ServerName, "etcd-server-name", e.TLS.ServerName, "name checked in the etcd members' certificates (default: the host dialled)")
	fl.DurationVar(&e.DialTimeout, "etcd-dial-timeout", e.DialTimeout, "etcd member connect timeout; with --etcd-user, the first login's bound (each failed attempt doubles it, up to 16s)")
	fl.DurationVar(&e.RequestTimeout, "etcd-request-timeout", e.RequestTimeout, "bound on etcd reads and health probes")
}
