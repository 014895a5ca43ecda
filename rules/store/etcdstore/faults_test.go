package etcdstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/rules/store/storetest"
	"github.com/infergate/infergate/spec"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// recordingRuntime counts what the store asked the datapath to do, so a
// test can prove an outage never made it stop serving.
type recordingRuntime struct {
	mu       sync.Mutex
	serving  map[string]bool
	removals int
}

func (r *recordingRuntime) Install(prev, next *spec.Rule) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.serving == nil {
		r.serving = map[string]bool{}
	}
	r.serving[next.Key.String()] = true
	return nil
}

func (r *recordingRuntime) Remove(x *spec.Rule) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.serving, x.Key.String())
	r.removals++
}

func (r *recordingRuntime) servingCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.serving)
}

type rejectCounter struct {
	mu sync.Mutex
	by map[string]int
}

func (c *rejectCounter) inc(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]int{}
	}
	c.by[reason]++
}

func (c *rejectCounter) get(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[reason]
}

type replica struct {
	store   *store.Store
	backend *etcdstore.Backend
	rt      *recordingRuntime
	rejects *rejectCounter
}

func openBackend(t testing.TB, endpoints []string, prefix string) *etcdstore.Backend {
	t.Helper()
	o := etcdstore.DefaultOptions()
	o.Endpoints = endpoints
	o.Prefix = prefix
	o.HealthInterval = 100 * time.Millisecond
	o.RequestTimeout = time.Second
	b, err := etcdstore.Open(o, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newReplica opens a Store on etcd without replaying it.
func newReplica(t testing.TB, endpoints []string, prefix string, backend store.Backend) *replica {
	t.Helper()
	r := &replica{rt: &recordingRuntime{}, rejects: &rejectCounter{}}
	if backend == nil {
		r.backend = openBackend(t, endpoints, prefix)
		backend = r.backend
	}
	o := store.DefaultOptions()
	o.Backend = backend
	o.Runtime = r.rt
	o.Log = quietLog()
	o.CommitTimeout = 2 * time.Second
	o.OnRejectedValue = r.rejects.inc
	s, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r.store = s
	return r
}

func replay(t testing.TB, r *replica) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.store.Replay(ctx); err != nil {
		t.Fatalf("Replay: %v", err)
	}
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func has(s *store.Store, port int, ep string) bool {
	e, err := s.Get("10.0.0.10", port, "tcp")
	return err == nil && (ep == "" || e.Rule.Endpoints[0].EndpointIP == ep)
}

func put(t *testing.T, cli *clientv3.Client, key, val string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, key, val); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// TestDirectWritesAreValidated: values written straight into etcd take the
// API's path; malformed, invalid, foreign and mis-keyed values are counted
// and never applied, and a valid one is served.
func TestDirectWritesAreValidated(t *testing.T) {
	c := etcdtest.Start(t, 1)
	r := newReplica(t, c.Endpoints(), "/direct", nil)
	replay(t, r)
	cli := c.Client(t)
	bad := storetest.Rule(81)
	bad.Endpoints = nil
	badJSON, _ := jsonOf(bad)
	put(t, cli, "/direct/rules/garbage", "{not json")
	put(t, cli, "/direct/rules/"+storetest.Key(81), badJSON)
	put(t, cli, "/direct/rules/10.0.0.10:9999|tcp", string(storetest.Value(t, 82)))
	put(t, cli, "/direct/rules/"+storetest.Key(80), string(storetest.Value(t, 80)))
	eventually(t, 5*time.Second, "the valid direct write to be served", func() bool { return has(r.store, 80, "10.1.0.1") })
	eventually(t, 5*time.Second, "the bad values to be counted", func() bool {
		return r.rejects.get("malformed") == 1 && r.rejects.get("invalid") == 1 && r.rejects.get("key_mismatch") == 1
	})
	if n := len(r.store.List()); n != 1 {
		t.Fatalf("serving %d rules, want only the valid one", n)
	}
	// A direct update that changes an immutable field is refused too; the
	// served version stays.
	imm := storetest.Rule(80)
	imm.ServiceArguments.KVEngineType = "sglang"
	v, _ := jsonOf(imm)
	put(t, cli, "/direct/rules/"+storetest.Key(80), v)
	eventually(t, 5*time.Second, "the immutable change to be refused", func() bool { return r.rejects.get("immutable_field") == 1 })
	if e, _ := r.store.Get("10.0.0.10", 80, "tcp"); e.Rule.ServiceArguments.KVEngineType != "" {
		t.Fatalf("immutable change applied: %q", e.Rule.ServiceArguments.KVEngineType)
	}
	// A replica booting on the same prefix refuses the same values.
	r2 := newReplica(t, c.Endpoints(), "/direct", nil)
	replay(t, r2)
	if n := len(r2.store.List()); n != 1 || r2.rejects.get("malformed") != 1 {
		t.Fatalf("second replica serves %d rules, rejects %v", n, r2.rejects.by)
	}
}

// TestOutageKeepsServingAndCatchesUp: with etcd gone, the replica serves its
// rules, reports unhealthy, refuses writes with 503 store_unavailable; when
// etcd is back it catches up with what changed, without a restart.
func TestOutageKeepsServingAndCatchesUp(t *testing.T) {
	c := etcdtest.Start(t, 3)
	a := newReplica(t, c.Endpoints(), "/outage", nil)
	replay(t, a)
	for _, p := range []int{80, 81} {
		if _, _, err := a.store.Apply(storetest.Rule(p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range c.Members {
		m.Kill()
	}
	eventually(t, 10*time.Second, "the store to report etcd unreachable", func() bool { return a.store.StoreHealth() != nil })
	_, _, err := a.store.Apply(storetest.Rule(82))
	if e, ok := apierror.As(err); !ok || e.Status != 503 || e.Code != apierror.CodeStoreUnavailable {
		t.Fatalf("write during outage: %v, want 503 store_unavailable", err)
	}
	if _, err := a.store.DeleteAll(); err == nil {
		t.Fatal("delete during outage succeeded")
	}
	if a.rt.servingCount() != 2 || len(a.store.List()) != 2 {
		t.Fatalf("during the outage serving %d (store lists %d), want 2", a.rt.servingCount(), len(a.store.List()))
	}
	if has(a.store, 82, "") {
		t.Fatal("the refused write is served")
	}
	for _, m := range c.Members {
		if err := m.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitHealthy(t, 20*time.Second)
	eventually(t, 10*time.Second, "the store to report etcd reachable", func() bool { return a.store.StoreHealth() == nil })
	// A change made by someone else after the outage reaches the replica.
	put(t, c.Client(t), "/outage/rules/"+storetest.Key(83), string(storetest.Value(t, 83)))
	eventually(t, 10*time.Second, "the replica to catch up", func() bool { return has(a.store, 83, "") })
	if _, _, err := a.store.Apply(storetest.Rule(82)); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
}

// TestColdStartWhileDown: a replica booting with etcd unreachable serves
// nothing (no stale cache) until it has synced once, then serves exactly
// what etcd holds.
func TestColdStartWhileDown(t *testing.T) {
	c := etcdtest.Start(t, 1)
	a := newReplica(t, c.Endpoints(), "/cold", nil)
	replay(t, a)
	for _, p := range []int{80, 81} {
		if _, _, err := a.store.Apply(storetest.Rule(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.store.Delete(mustKey(t, a.store, 81)); err != nil {
		t.Fatal(err)
	}
	c.Members[0].Kill()
	b := newReplica(t, c.Endpoints(), "/cold", nil)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- b.store.Replay(ctx)
	}()
	time.Sleep(500 * time.Millisecond) // a replay that wrongly succeeds offline would be done by now
	if b.store.Ready() || b.rt.servingCount() != 0 {
		t.Fatalf("replica ready=%v serving %d before it ever reached etcd", b.store.Ready(), b.rt.servingCount())
	}
	if err := c.Members[0].Restart(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Replay after etcd returned: %v", err)
	}
	if !has(b.store, 80, "") || has(b.store, 81, "") || b.rt.servingCount() != 1 {
		t.Fatalf("after sync the replica serves %v, want exactly rule 80", b.store.List())
	}
}

func mustKey(t *testing.T, s *store.Store, port int) spec.Key {
	t.Helper()
	e, err := s.Get("10.0.0.10", port, "tcp")
	if err != nil {
		t.Fatal(err)
	}
	return e.Compiled.Key
}

// gatedWatch delays the start of the watch so the test can compact past
// the revision the replica replayed at.
type gatedWatch struct {
	*etcdstore.Backend
	gate chan struct{}
}

func (g gatedWatch) Watch(ctx context.Context, after int64) <-chan store.Update {
	out := make(chan store.Update)
	go func() {
		defer close(out)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return
		}
		for u := range g.Backend.Watch(ctx, after) {
			out <- u
		}
	}()
	return out
}

// TestCompactionResync: when the revision a replica would resume from was
// compacted, it reloads the whole set: deletes and creates it missed are
// applied, unchanged rules are not re-installed.
func TestCompactionResync(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	put(t, cli, "/compact/rules/"+storetest.Key(80), string(storetest.Value(t, 80)))
	put(t, cli, "/compact/rules/"+storetest.Key(81), string(storetest.Value(t, 81)))
	g := gatedWatch{Backend: openBackend(t, c.Endpoints(), "/compact"), gate: make(chan struct{})}
	a := newReplica(t, nil, "", g)
	replay(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Delete(ctx, "/compact/rules/"+storetest.Key(81)); err != nil {
		t.Fatal(err)
	}
	put(t, cli, "/compact/rules/"+storetest.Key(82), string(storetest.Value(t, 82)))
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	removalsBefore := a.rt.removals
	close(g.gate)
	eventually(t, 10*time.Second, "the resync to apply what was missed", func() bool {
		return has(a.store, 80, "") && !has(a.store, 81, "") && has(a.store, 82, "")
	})
	if got := a.rt.removals - removalsBefore; got != 1 {
		t.Fatalf("resync removed %d rules from the datapath, want only the deleted one", got)
	}
}

// TestMemberKillUnderWriteLoad: with one of three members killed while a
// replica writes continuously, writes keep being acknowledged, and each
// acknowledged write is in etcd.
func TestMemberKillUnderWriteLoad(t *testing.T) {
	c := etcdtest.Start(t, 3)
	a := newReplica(t, c.Endpoints(), "/load", nil)
	replay(t, a)
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var lastAcked atomic.Int64
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := a.store.Apply(storetest.Rule(80, fmt.Sprintf("10.3.%d.%d", i/250, i%250+1))); err != nil {
				failed.Add(1)
				t.Logf("write %d: %v", i, err)
				continue
			}
			ok.Add(1)
			lastAcked.Store(int64(i))
		}
	}()
	time.Sleep(time.Second)
	before := ok.Load()
	c.Members[0].Kill()
	// Two seconds of writes, and longer (up to 15 s) until one is
	// acknowledged: with the leader killed on a loaded box the election
	// alone can outlast two seconds.
	killed := time.Now()
	for time.Since(killed) < 15*time.Second && (time.Since(killed) < 2*time.Second || ok.Load() == before) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	after := ok.Load() - before
	t.Logf("writes acknowledged: %d before the kill, %d after; failed: %d", before, after, failed.Load())
	if after == 0 {
		t.Fatal("no write was acknowledged after one of three members died")
	}
	if failed.Load() != 0 {
		t.Fatalf("%d writes failed while a quorum was up", failed.Load())
	}
	i := lastAcked.Load()
	want := fmt.Sprintf("10.3.%d.%d", i/250, i%250+1)
	r2 := newReplica(t, c.Endpoints()[1:], "/load", nil)
	replay(t, r2)
	if !has(r2.store, 80, want) {
		t.Fatalf("the last acknowledged write (%s) is not what etcd holds", want)
	}
}
