package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// etcdClientFlags are the etcd client flags of the commands that talk to
// the store directly (migrate, get replicas); serve has the same ones.
func etcdClientFlags(fl *pflag.FlagSet, e *etcdstore.Options) {
	fl.StringVar(&e.TLS.CAFile, "etcd-ca", e.TLS.CAFile, "PEM CA bundle that signs the etcd members' certificates (turns TLS on)")
	fl.StringVar(&e.TLS.CertFile, "etcd-cert", e.TLS.CertFile, "client certificate for etcd mutual TLS")
	fl.StringVar(&e.TLS.KeyFile, "etcd-key", e.TLS.KeyFile, "client key for etcd mutual TLS")
	fl.StringVar(&e.Username, "etcd-user", e.Username, "etcd auth user")
	fl.StringVar(&e.PasswordFile, "etcd-password-file", e.PasswordFile, "file holding the etcd auth password")
}

// openStoreBackend opens a directory (file store) or an etcd:// URL.
func openStoreBackend(where string, eo etcdstore.Options) (store.Backend, *etcdstore.Backend, error) {
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	if !etcdstore.IsURL(where) {
		b, err := store.OpenFileBackend(where, log, nil)
		return b, nil, err
	}
	if err := eo.ParseURL(where); err != nil {
		return nil, nil, usagef("%v", err)
	}
	b, err := etcdstore.Open(eo, log, nil)
	return b, b, err
}

func newMigrateCmd(g *globals) *cobra.Command {
	eo := etcdstore.DefaultOptions()
	var from, to string
	cmd := &cobra.Command{
		Use:   "migrate --from <state-dir|etcd://…> --to <state-dir|etcd://…>",
		Short: "Copy the rule set between a file store (state dir) and etcd",
		Long: `migrate copies every valid rule from one rs to the other (a state dir
holding rules.json, or etcd://h1:2379,h2:2379/prefix) and keeps the
destination's other rules. Invalid values are listed and not copied.
Stop the gateways writing the source first, or re-run until nothing changes.`,
		Args: exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return usagef("migrate needs --from and --to")
			}
			src, _, err := openStoreBackend(from, eo)
			if err != nil {
				return fmt.Errorf("open %s: %w", from, err)
			}
			defer src.Close()
			dst, _, err := openStoreBackend(to, eo)
			if err != nil {
				return fmt.Errorf("open %s: %w", to, err)
			}
			defer dst.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), max(g.timeout, 30*time.Second))
			defer cancel()
			rep, err := store.Migrate(ctx, src, dst)
			for _, s := range rep.Skipped {
				fmt.Fprintf(g.env.Stderr, "skipped: %s\n", s)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.env.Stdout, "copied %d rules, %d already identical, %d skipped\n", rep.Copied, rep.Unchanged, len(rep.Skipped))
			return nil
		}),
	}
	cmd.Flags().StringVar(&from, "from", "", "source: state dir or etcd:// URL")
	cmd.Flags().StringVar(&to, "to", "", "destination: state dir or etcd:// URL")
	etcdClientFlags(cmd.Flags(), &eo)
	return cmd
}

func newGetReplicasCmd(g *globals) *cobra.Command {
	eo := etcdstore.DefaultOptions()
	var rs string
	cmd := &cobra.Command{
		Use:   "replicas [--store etcd://…]",
		Short: "List the gateway replicas sharing an etcd store and whether they serve the same rules",
		Long: `replicas lists every live replica (id, API address, applied store revision,
rule count, digest of its served set) and exits 1 when their digests differ:
replicas that agree serve exactly the same rules. Without --store it asks the
gateway at --server, which reads its own shared store.`,
		Args: exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if rs == "" {
				return replicasFromServer(cmd, g)
			}
			if !etcdstore.IsURL(rs) {
				return usagef("get replicas --store needs etcd://host:port[,…][/prefix]")
			}
			_, eb, err := openStoreBackend(rs, eo)
			if err != nil {
				return err
			}
			defer eb.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			reps, rev, err := etcdstore.Replicas(ctx, eb.Client(), eb.Prefix())
			if err != nil {
				return err
			}
			rows := make([]client.Replica, len(reps))
			for i, r := range reps {
				rows[i] = client.Replica{ID: r.ID, API: r.API, Revision: r.Revision, Rules: r.Rules, Digest: r.Digest, Updated: r.Updated}
			}
			return writeReplicas(g.env.Stdout, rows, rev, eb.Prefix())
		}),
	}
	cmd.Flags().StringVar(&rs, "store", "", "etcd:// URL of the shared store (default: ask the gateway at --server)")
	etcdClientFlags(cmd.Flags(), &eo)
	return cmd
}

func contextWithTimeout(cmd *cobra.Command, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), d)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
