package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrBlobConflict: the blob changed since the revision a Save named.
var ErrBlobConflict = errors.New("etcdstore: changed through another replica")

// Blob is one document kept whole under <prefix>/<name>, written with
// compare-and-swap on its revision and watched: how replicas share the
// tenant key registry (tenant.Persister), which is small and written
// rarely, so one key is simpler than a key per record.
type Blob struct {
	b   *Backend
	key string
}

// Blob returns the shared document called name.
func (b *Backend) Blob(name string) *Blob { return &Blob{b: b, key: b.opts.Prefix + "/" + name} }

// Load returns the document (nil when absent) and its revision (0: absent).
func (x *Blob) Load(ctx context.Context) ([]byte, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, x.b.opts.RequestTimeout)
	defer cancel()
	cli, err := x.b.client(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: read %s: %w", x.key, err)
	}
	resp, err := cli.Get(ctx, x.key)
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: read %s: %w", x.key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// Save replaces the document if it is still at rev (0: absent) and returns
// the new revision; ErrBlobConflict otherwise.
func (x *Blob) Save(ctx context.Context, data []byte, rev int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, x.b.opts.RequestTimeout)
	defer cancel()
	cli, err := x.b.client(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcd: write %s: %w", x.key, err)
	}
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(x.key), "=", rev)).
		Then(clientv3.OpPut(x.key, string(data))).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcd: write %s: %w", x.key, err)
	}
	if !resp.Succeeded {
		return 0, ErrBlobConflict
	}
	return resp.Header.Revision, nil
}

// Watch calls fn with every later version of the document (data nil when
// deleted) until the backend closes, re-reading it after a watch breaks.
func (x *Blob) Watch(fn func(data []byte, rev int64)) {
	ctx := x.b.done
	x.b.wg.Add(1)
	go func() {
		defer x.b.wg.Done()
		cli, err := x.b.waitClient(ctx)
		if err != nil {
			return
		}
		for ctx.Err() == nil {
			data, rev, err := x.Load(ctx)
			if err != nil {
				sleepCtx(ctx, time.Second)
				continue
			}
			if rev > 0 {
				fn(data, rev)
			}
			wch := cli.Watch(clientv3.WithRequireLeader(ctx), x.key, clientv3.WithRev(max(rev, 1)+1))
			for resp := range wch {
				if resp.Err() != nil {
					break
				}
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypeDelete {
						fn(nil, ev.Kv.ModRevision)
						continue
					}
					fn(ev.Kv.Value, ev.Kv.ModRevision)
				}
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
