package etcdstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
)

// TestAnnounce: a replica's entry follows its served set and disappears
// when it stops.
func TestAnnounce(t *testing.T) {
	c := etcdtest.Start(t, 3)
	b := openBackend(t, c.Endpoints(), "/ann")
	var n atomic.Int64
	b.Announce("r1", func() etcdstore.ReplicaInfo {
		return etcdstore.ReplicaInfo{API: "a", Rules: int(n.Load()), Digest: string(rune('a' + n.Load()))}
	})
	cli := c.Client(t)
	list := func() []etcdstore.ReplicaInfo {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, _, err := etcdstore.Replicas(ctx, cli, "/ann")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	eventually(t, 5*time.Second, "the entry", func() bool { r := list(); return len(r) == 1 && r[0].Rules == 0 })
	n.Store(3)
	eventually(t, 5*time.Second, "the entry to follow the set", func() bool { r := list(); return len(r) == 1 && r[0].Rules == 3 })
	b.Close()
	// Close revokes the lease; if the revoke is lost (a loaded box), the
	// 10 s lease still takes the entry: wait past it.
	eventually(t, 20*time.Second, "the entry to go with the replica", func() bool { return len(list()) == 0 })
}
