package etcdstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Backend is the etcd store.Backend. Build it with Open; it does not wait
// for etcd (nor for the login, with a user), so a replica starting during an
// outage comes up (not ready).
type Backend struct {
	opts      Options
	tls       *tls.Config
	conn      atomic.Pointer[clientv3.Client] // nil until connect made it
	connected chan struct{}                   // closed once conn is set
	rules     string                          // <prefix>/rules/
	log       logrus.FieldLogger
	m         *metrics.Store // nil: not counted
	health    atomic.Pointer[healthState]
	seen      atomic.Int64    // highest etcd revision seen in any response
	done      context.Context // ends at Close
	stop      context.CancelFunc
	wg        sync.WaitGroup
}

type healthState struct{ err error }

// errNotYetReached is the health of a backend whose client is not made (or
// logged in) yet, or whose first probe is pending.
var errNotYetReached = errors.New("etcd not reached yet")

// Open checks the options and starts making the client in the background
// (connect.go); the health probe starts once it exists. A setting that can
// never work (no endpoints, unreadable TLS or password files) fails here.
func Open(o Options, log logrus.FieldLogger, m *metrics.Store) (*Backend, error) {
	o = o.withDefaults()
	if len(o.Endpoints) == 0 {
		return nil, fmt.Errorf("etcdstore: no etcd endpoints")
	}
	if log == nil {
		log = logrus.StandardLogger()
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	if _, err := o.password(); err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{opts: o, tls: tlsCfg, connected: make(chan struct{}), rules: o.Prefix + "/rules/",
		log: log.WithField("component", "etcdstore"), m: m, done: ctx, stop: cancel}
	b.health.Store(&healthState{err: errNotYetReached})
	b.wg.Add(1)
	go b.connect()
	return b, nil
}

// Client reads the registry (replicas, engines) through this backend's
// connection, waiting for it within each call's context.
func (b *Backend) Client() Client { return backendClient{b} }

// Prefix is the key prefix every key of this gateway lives under.
func (b *Backend) Prefix() string { return b.opts.Prefix }

// Close stops connecting and probing and closes the client.
func (b *Backend) Close() error {
	b.stop()
	b.wg.Wait()
	if cli := b.conn.Load(); cli != nil {
		return cli.Close()
	}
	return nil
}

// Health is nil while a quorum answered the last probe; before the client
// exists it says why (not reached yet, or ErrAuthFailed).
func (b *Backend) Health() error { return b.health.Load().err }

// SeenRevision is the newest etcd revision this replica has heard of.
func (b *Backend) SeenRevision() int64 { return b.seen.Load() }

func (b *Backend) noteRevision(rev int64) {
	for {
		cur := b.seen.Load()
		if rev <= cur || b.seen.CompareAndSwap(cur, rev) {
			return
		}
	}
}

func (b *Backend) setHealth(err error) {
	prev := b.health.Swap(&healthState{err: err}).err
	if (prev == nil) != (err == nil) {
		if err != nil {
			b.log.WithError(err).Warn("etcd unreachable: serving the last applied rules, writes answer 503")
		} else {
			b.log.Info("etcd reachable again")
		}
	}
	if b.m != nil {
		if err == nil {
			b.m.Reachable.Set(1)
		} else {
			b.m.Reachable.Set(0)
		}
	}
}

// probe does a linearizable read every HealthInterval: it succeeds only
// when the cluster has a quorum, which is exactly when writes can commit.
// connect starts it once the client exists.
func (b *Backend) probe(ctx context.Context) {
	defer b.wg.Done()
	cli := b.conn.Load()
	t := time.NewTicker(b.opts.HealthInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
		resp, err := cli.Get(pctx, b.opts.Prefix+"/health", clientv3.WithCountOnly())
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			b.noteRevision(resp.Header.Revision)
		}
		b.setHealth(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Load reads every rule under the prefix at one revision.
func (b *Backend) Load(ctx context.Context) (store.Loaded, error) {
	ctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	cli, err := b.client(ctx)
	if err != nil {
		return store.Loaded{}, store.Unavailable(fmt.Errorf("etcd: load %s: %w", b.rules, err))
	}
	resp, err := cli.Get(ctx, b.rules, clientv3.WithPrefix())
	if err != nil {
		b.setHealth(err)
		return store.Loaded{}, store.Unavailable(fmt.Errorf("etcd: load %s: %w", b.rules, err))
	}
	b.setHealth(nil)
	b.noteRevision(resp.Header.Revision)
	out := store.Loaded{Revision: resp.Header.Revision, Values: make([]store.StoredValue, 0, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		out.Values = append(out.Values, store.StoredValue{
			Key: strings.TrimPrefix(string(kv.Key), b.rules), Value: kv.Value, Revision: kv.ModRevision})
	}
	return out, nil
}

// Commit runs the change as one transaction guarded by every key's mod
// revision; it returns once etcd has committed it (a quorum has it).
func (b *Backend) Commit(ctx context.Context, c store.Change) (int64, error) {
	var conds []clientv3.Cmp
	var ops []clientv3.Op
	for _, p := range c.Puts {
		k := b.rules + p.Key
		conds = append(conds, clientv3.Compare(clientv3.ModRevision(k), "=", p.Expect))
		ops = append(ops, clientv3.OpPut(k, string(p.Value)))
	}
	for _, d := range c.Deletes {
		k := b.rules + d.Key
		conds = append(conds, clientv3.Compare(clientv3.ModRevision(k), "=", d.Expect))
		ops = append(ops, clientv3.OpDelete(k))
	}
	cli, err := b.client(ctx)
	if err != nil {
		return 0, store.Unavailable(fmt.Errorf("etcd: commit: %w", err))
	}
	var resp *clientv3.TxnResponse
	retried := false
	for {
		// Each attempt is bounded on its own: a proposal caught in a leader
		// change can hang until the member's own timeout, far past ours.
		actx, cancel := context.WithTimeout(ctx, commitAttemptTimeout)
		resp, err = cli.Txn(actx).If(conds...).Then(ops...).Commit()
		cancel()
		if err == nil || ctx.Err() != nil || !(transient(err) || errors.Is(err, context.DeadlineExceeded)) {
			break
		}
		// The member we asked died or lost its leader mid-request. The
		// attempt may have committed; the retry's compare then fails and
		// alreadyCommitted tells the two apart.
		retried = true
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		if errors.Is(err, rpctypes.ErrTooManyOps) {
			return 0, fmt.Errorf("etcd: change of %d keys exceeds the cluster's --max-txn-ops: %w", len(ops), err)
		}
		b.setHealth(err)
		return 0, store.Unavailable(fmt.Errorf("etcd: commit: %w", err))
	}
	b.noteRevision(resp.Header.Revision)
	if !resp.Succeeded && retried {
		if rev, ok := b.alreadyCommitted(ctx, cli, c); ok {
			return rev, nil
		}
	}
	if !resp.Succeeded {
		key, expect := "", int64(0)
		if len(c.Puts) > 0 {
			key, expect = c.Puts[0].Key, c.Puts[0].Expect
		} else if len(c.Deletes) > 0 {
			key, expect = c.Deletes[0].Key, c.Deletes[0].Expect
		}
		return 0, store.RevisionConflict(key, expect)
	}
	return resp.Header.Revision, nil
}

// commitAttemptTimeout bounds one transaction attempt; Commit retries
// within its caller's deadline.
const commitAttemptTimeout = time.Second

// transient is an error after which the same request may succeed on
// another member (the one asked went away), as opposed to a deadline.
// The member's own proposal timeouts count: "request timed out" is what a
// write caught in a leader election gets when the election outlasts the
// member's timeout (seen with the leader killed on a loaded box), and the
// write may have committed, which the retry's compare and alreadyCommitted
// sort out. The client hands these back as rpctypes.EtcdError, whose gRPC
// code status.Code cannot read, so they are named.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return status.Code(err) == codes.Unavailable || errors.Is(err, rpctypes.ErrLeaderChanged) ||
		errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost)
}

// alreadyCommitted reports whether the store already holds exactly what c
// writes (its first, ambiguous attempt committed) and at which revision.
func (b *Backend) alreadyCommitted(ctx context.Context, cli *clientv3.Client, c store.Change) (int64, bool) {
	var rev int64
	for _, p := range c.Puts {
		resp, err := cli.Get(ctx, b.rules+p.Key)
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != string(p.Value) {
			return 0, false
		}
		rev = max(rev, resp.Kvs[0].ModRevision)
	}
	for _, d := range c.Deletes {
		resp, err := cli.Get(ctx, b.rules+d.Key, clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			return 0, false
		}
		rev = max(rev, resp.Header.Revision)
	}
	return rev, true
}

// Watch follows the rules prefix from after+1. It re-opens the watch from
// the last delivered revision when it breaks (leader loss, disconnect) and
// sends a Reset with the complete set when that revision was compacted.
func (b *Backend) Watch(ctx context.Context, after int64) <-chan store.Update {
	out := make(chan store.Update, 16)
	go func() {
		defer close(out)
		rev := after
		delay := b.opts.RetryDelay
		for ctx.Err() == nil {
			next, compacted := b.watchOnce(ctx, rev, out)
			if next > rev {
				rev, delay = next, b.opts.RetryDelay
			}
			if ctx.Err() != nil {
				return
			}
			if compacted {
				r, ok := b.resync(ctx, out)
				if !ok {
					return
				}
				rev = r
				continue
			}
			if b.m != nil {
				b.m.WatchRestarts.Inc()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 2*time.Second)
		}
	}()
	return out
}

// watchOnce runs one watch stream until it ends; it returns the last
// revision delivered and whether the stream ended because of compaction.
func (b *Backend) watchOnce(ctx context.Context, rev int64, out chan<- store.Update) (int64, bool) {
	cli, err := b.client(ctx)
	if err != nil {
		return rev, false
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := cli.Watch(wctx, b.rules, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	// Revisions are global to etcd: writes elsewhere advance them without an
	// event here. Asking for progress keeps the applied revision (and so
	// the lag metric) honest when the rules are idle.
	go func() {
		t := time.NewTicker(b.opts.HealthInterval)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				_ = cli.RequestProgress(wctx)
			}
		}
	}()
	for resp := range wch {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			b.log.WithFields(logrus.Fields{"from": rev + 1, "compacted": resp.CompactRevision}).
				Warn("etcd compacted past the applied revision; reloading the whole rule set")
			return rev, true
		}
		if err := resp.Err(); err != nil {
			b.log.WithError(err).WithField("revision", rev).Info("etcd watch ended; resuming from the last applied revision")
			return rev, false
		}
		b.noteRevision(resp.Header.Revision)
		u := store.Update{Revision: resp.Header.Revision}
		for _, ev := range resp.Events {
			v := store.StoredValue{Key: strings.TrimPrefix(string(ev.Kv.Key), b.rules), Revision: ev.Kv.ModRevision}
			if ev.Type == clientv3.EventTypePut {
				v.Value = ev.Kv.Value
				if v.Value == nil {
					v.Value = []byte{}
				}
			}
			u.Values = append(u.Values, v)
		}
		if resp.IsProgressNotify() && len(u.Values) == 0 && u.Revision <= rev {
			continue
		}
		select {
		case out <- u:
		case <-ctx.Done():
			return rev, false
		}
		rev = max(rev, u.Revision)
	}
	return rev, false
}

// resync loads the whole set (retrying while etcd is away) and sends it as
// a Reset; it returns the revision to watch from.
func (b *Backend) resync(ctx context.Context, out chan<- store.Update) (int64, bool) {
	if b.m != nil {
		b.m.Resyncs.Inc()
	}
	delay := b.opts.RetryDelay
	for {
		l, err := b.Load(ctx)
		if err == nil {
			select {
			case out <- store.Update{Revision: l.Revision, Values: l.Values, Reset: true}:
				return l.Revision, true
			case <-ctx.Done():
				return 0, false
			}
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

var (
	_ store.Backend        = (*Backend)(nil)
	_ store.Watcher        = (*Backend)(nil)
	_ store.HealthReporter = (*Backend)(nil)
)
