package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReplicaInfo is what each replica publishes under <prefix>/replicas/<id>.
type ReplicaInfo struct {
	ID       string    `json:"id"`
	API      string    `json:"api"`      // management API address
	Revision int64     `json:"revision"` // store revision of the served rule set
	Rules    int       `json:"rules"`
	Digest   string    `json:"digest"` // of the served set (keys and revisions): equal digests, same rules
	Updated  time.Time `json:"updated"`
}

// replicaTTL is the lease of a replica's entry: a replica that stops (or is
// partitioned) disappears from `get replicas` this long after.
const replicaTTL = 10 // seconds

func (b *Backend) replicaKey(id string) string { return b.opts.Prefix + "/replicas/" + id }

// Announce keeps this replica's entry current (every HealthInterval, on a
// lease) until Close. info is read each time.
func (b *Backend) Announce(id string, info func() ReplicaInfo) {
	ctx := b.done
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		cli, err := b.waitClient(ctx)
		if err != nil {
			return // closed before etcd was reached
		}
		var lease clientv3.LeaseID
		var last []byte
		t := time.NewTicker(b.opts.HealthInterval)
		defer t.Stop()
		for {
			lease, last = b.announceOnce(ctx, cli, id, info, lease, last)
			select {
			case <-ctx.Done():
				if lease != 0 { // leave at once on a clean stop
					rctx, c := context.WithTimeout(context.Background(), time.Second)
					_, _ = cli.Revoke(rctx, lease)
					c()
				}
				return
			case <-t.C:
			}
		}
	}()
}

// announceOnce refreshes the lease and rewrites the entry when the served
// set changed (not on every revision: revisions are global, and rewriting
// on each would make replicas bump each other's forever).
// On any error the lease is dropped and re-granted next time.
func (b *Backend) announceOnce(ctx context.Context, cli *clientv3.Client, id string, info func() ReplicaInfo, lease clientv3.LeaseID, last []byte) (clientv3.LeaseID, []byte) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	if lease == 0 {
		g, err := cli.Grant(ctx, replicaTTL)
		if err != nil {
			return 0, nil
		}
		lease, last = g.ID, nil
	} else if _, err := cli.KeepAliveOnce(ctx, lease); err != nil {
		return 0, nil
	}
	ri := info()
	ri.ID = id
	cmp := []byte(ri.API + "|" + ri.Digest)
	if string(cmp) == string(last) {
		return lease, last
	}
	ri.Updated = time.Now().UTC()
	val, _ := json.Marshal(ri)
	if _, err := cli.Put(ctx, b.replicaKey(id), string(val), clientv3.WithLease(lease)); err != nil {
		return 0, nil
	}
	return lease, cmp
}

// Replicas lists every live replica and the current store revision.
func Replicas(ctx context.Context, cli Client, prefix string) ([]ReplicaInfo, int64, error) {
	p := "/" + strings.Trim(prefix, "/") + "/replicas/"
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: list replicas: %w", err)
	}
	var out []ReplicaInfo
	for _, kv := range resp.Kvs {
		var ri ReplicaInfo
		if err := json.Unmarshal(kv.Value, &ri); err != nil {
			continue // not ours; never fail the listing on one bad entry
		}
		out = append(out, ri)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, resp.Header.Revision, nil
}
