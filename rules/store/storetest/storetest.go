// Package storetest is the one conformance suite every store.Backend passes
// (the file backend and etcd): create, update, delete, conflict, atomicity,
// restart, and — for shared backends — watch and concurrent replicas. It
// tests the contract through the Backend and through a store.Store on top,
// so both implementations keep the same observable behaviour.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// Location is one durable place a backend keeps rules (a directory, an
// etcd prefix). Open may be called again after Close: that is a restart.
type Location struct {
	Open func(t *testing.T) store.Backend
	// Shared: several handles may be open at once and see each other's
	// writes through Watch (etcd).
	Shared bool
}

// Run runs the suite; newLocation gives each subtest a fresh, empty place.
func Run(t *testing.T, newLocation func(t *testing.T) Location) {
	tests := []struct {
		name   string
		shared bool
		run    func(t *testing.T, loc Location)
	}{
		{"create", false, testCreate},
		{"update", false, testUpdate},
		{"delete", false, testDelete},
		{"conflict", false, testConflict},
		{"atomic", false, testAtomic},
		{"restart", false, testRestart},
		{"crash", false, testCrash},
		{"store_restart", false, testStoreRestart},
		{"watch", true, testWatch},
		{"replicas", true, testReplicas},
		{"replica_conflict", true, testReplicaConflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			loc := newLocation(t)
			if tc.shared && !loc.Shared {
				t.Skip("single-writer backend: no other process writes it, nothing to watch")
			}
			tc.run(t, loc)
		})
	}
}

// Rule is a valid rule on port (its BackendKey is "10.0.0.10:<port>|tcp").
func Rule(port int, endpoints ...string) rules.Rule {
	if len(endpoints) == 0 {
		endpoints = []string{"10.1.0.1"}
	}
	r := rules.Rule{ServiceArguments: rules.ServiceArguments{ExternalIP: "10.0.0.10", Port: port, Protocol: "tcp", Mode: 4,
		Name: fmt.Sprintf("r%d", port)}}
	for _, ep := range endpoints {
		r.Endpoints = append(r.Endpoints, rules.Endpoint{EndpointIP: ep, TargetPort: 8000, Weight: 1})
	}
	return r
}

// Key is the BackendKey of Rule(port).
func Key(port int) string { return fmt.Sprintf("10.0.0.10:%d|tcp", port) }

// Value is Rule(port, endpoints...) as stored.
func Value(t *testing.T, port int, endpoints ...string) []byte {
	t.Helper()
	b, err := json.Marshal(Rule(port, endpoints...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func load(t *testing.T, b store.Backend) map[string]store.StoredValue {
	t.Helper()
	l, err := b.Load(ctx(t))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	out := map[string]store.StoredValue{}
	for _, v := range l.Values {
		if v.Revision <= 0 || v.Revision > l.Revision {
			t.Errorf("value %s revision %d outside (0, %d]", v.Key, v.Revision, l.Revision)
		}
		out[v.Key] = v
	}
	return out
}

func commit(t *testing.T, b store.Backend, c store.Change) int64 {
	t.Helper()
	rev, err := b.Commit(ctx(t), c)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if rev <= 0 {
		t.Fatalf("Commit revision %d, want > 0", rev)
	}
	return rev
}

func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	e, ok := apierror.As(err)
	if !ok || e.Status != status || e.Code != code {
		t.Fatalf("error = %v, want %d %s", err, status, code)
	}
}

func open(t *testing.T, loc Location) store.Backend {
	b := loc.Open(t)
	t.Cleanup(func() { b.Close() })
	return b
}

func testCreate(t *testing.T, loc Location) {
	b := open(t, loc)
	rev := commit(t, b, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80)}}})
	got := load(t, b)
	v, ok := got[Key(80)]
	if !ok || len(got) != 1 {
		t.Fatalf("after create, Load = %v", got)
	}
	if v.Revision != rev || string(v.Value) != string(Value(t, 80)) {
		t.Fatalf("stored %s@%d, want %s@%d", v.Value, v.Revision, Value(t, 80), rev)
	}
	_, err := b.Commit(ctx(t), store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80, "10.9.9.9")}}})
	wantCode(t, err, 409, apierror.CodeRevisionConflict)
}

func testUpdate(t *testing.T, loc Location) {
	b := open(t, loc)
	r1 := commit(t, b, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80)}}})
	r2 := commit(t, b, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80, "10.1.0.2"), Expect: r1}}})
	if r2 <= r1 {
		t.Fatalf("update revision %d not after %d", r2, r1)
	}
	if v := load(t, b)[Key(80)]; v.Revision != r2 || string(v.Value) != string(Value(t, 80, "10.1.0.2")) {
		t.Fatalf("after update: %s@%d", v.Value, v.Revision)
	}
}

func testDelete(t *testing.T, loc Location) {
	b := open(t, loc)
	r1 := commit(t, b, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80)}, {Key: Key(81), Value: Value(t, 81)}}})
	commit(t, b, store.Change{Deletes: []store.Delete{{Key: Key(80), Expect: r1}}})
	got := load(t, b)
	if _, ok := got[Key(80)]; ok || len(got) != 1 {
		t.Fatalf("after delete, Load = %v", got)
	}
	_, err := b.Commit(ctx(t), store.Change{Deletes: []store.Delete{{Key: Key(80), Expect: r1}}})
	wantCode(t, err, 409, apierror.CodeRevisionConflict)
}

// testConflict: a write naming a stale revision changes nothing.
func testConflict(t *testing.T, loc Location) {
	b := open(t, loc)
	r1 := commit(t, b, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80)}}})
	commit(t, b, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80, "10.1.0.2"), Expect: r1}}})
	_, err := b.Commit(ctx(t), store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80, "10.1.0.3"), Expect: r1}}})
	wantCode(t, err, 409, apierror.CodeRevisionConflict)
	if v := load(t, b)[Key(80)]; string(v.Value) != string(Value(t, 80, "10.1.0.2")) {
		t.Fatalf("the losing write changed the value: %s", v.Value)
	}
}

// testAtomic: one failing condition in a change leaves every key as it was.
func testAtomic(t *testing.T, loc Location) {
	b := open(t, loc)
	r1 := commit(t, b, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80)}}})
	_, err := b.Commit(ctx(t), store.Change{
		Puts:    []store.Put{{Key: Key(81), Value: Value(t, 81)}},
		Deletes: []store.Delete{{Key: Key(80), Expect: r1 + 1000}},
	})
	wantCode(t, err, 409, apierror.CodeRevisionConflict)
	got := load(t, b)
	if _, ok := got[Key(81)]; ok || len(got) != 1 {
		t.Fatalf("half a change was applied: %v", got)
	}
}

func testRestart(t *testing.T, loc Location) {
	b := loc.Open(t)
	commit(t, b, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80)}, {Key: Key(81), Value: Value(t, 81)}}})
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	b2 := open(t, loc)
	got := load(t, b2)
	if len(got) != 2 || string(got[Key(81)].Value) != string(Value(t, 81)) {
		t.Fatalf("after restart, Load = %v", got)
	}
	// The reopened handle's revisions are the ones to compare against.
	commit(t, b2, store.Change{Puts: []store.Put{{Key: Key(81), Value: Value(t, 81, "10.1.0.7"), Expect: got[Key(81)].Revision}}})
}

// testCrash: what Commit acknowledged is there for the next process even
// when the writer never closed (it died): the first handle is abandoned.
func testCrash(t *testing.T, loc Location) {
	dead := loc.Open(t)
	t.Cleanup(func() { dead.Close() }) // only to free resources after the check
	r1 := commit(t, dead, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80)}}})
	commit(t, dead, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80, "10.1.0.8"), Expect: r1}}})
	got := load(t, open(t, loc))
	if v := got[Key(80)]; len(got) != 1 || string(v.Value) != string(Value(t, 80, "10.1.0.8")) {
		t.Fatalf("after a crash the next process loads %v", got)
	}
}

// newStore opens a Store over b and replays it.
func newStore(t *testing.T, b store.Backend) *store.Store {
	t.Helper()
	o := store.DefaultOptions()
	o.Backend = b
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	o.Log = l
	s, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replay(ctx(t)); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return s
}

// testStoreRestart: what a Store acknowledged is what the next one serves;
// what it refused is nowhere.
func testStoreRestart(t *testing.T, loc Location) {
	s := newStore(t, loc.Open(t))
	for _, p := range []int{80, 81, 82} {
		if _, _, err := s.Apply(Rule(p)); err != nil {
			t.Fatalf("Apply %d: %v", p, err)
		}
	}
	if _, _, err := s.Apply(Rule(81, "10.1.0.5")); err != nil {
		t.Fatalf("update 81: %v", err)
	}
	if _, _, err := s.Apply(Rule(81, "10.1.0.5")); err == nil {
		t.Fatal("identical re-apply accepted")
	}
	bad := Rule(83)
	bad.Endpoints = nil
	if _, _, err := s.Apply(bad); err == nil {
		t.Fatal("invalid rule accepted")
	}
	if err := s.Delete(mustKey(t, s, 82)); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2 := newStore(t, loc.Open(t))
	defer s2.Close()
	got := map[int][]string{}
	for _, e := range s2.List() {
		for _, ep := range e.Rule.Endpoints {
			got[e.Rule.ServiceArguments.Port] = append(got[e.Rule.ServiceArguments.Port], ep.EndpointIP)
		}
	}
	want := map[int][]string{80: {"10.1.0.1"}, 81: {"10.1.0.5"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after restart the store serves %v, want %v", got, want)
	}
}

func mustKey(t *testing.T, s *store.Store, port int) spec.Key {
	t.Helper()
	e, err := s.Get("10.0.0.10", port, "tcp")
	if err != nil {
		t.Fatalf("Get %d: %v", port, err)
	}
	return e.Compiled.Key
}

// testWatch: a write through one handle reaches another's watch, in order,
// and a direct write with a bad value is delivered (the Store refuses it).
func testWatch(t *testing.T, loc Location) {
	a, b := open(t, loc), open(t, loc)
	l, err := a.Load(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := a.(store.Watcher).Watch(wctx, l.Revision)
	r1 := commit(t, b, store.Change{Puts: []store.Put{{Key: Key(80), Value: Value(t, 80)}}})
	r2 := commit(t, b, store.Change{Deletes: []store.Delete{{Key: Key(80), Expect: r1}}})
	var seen []store.StoredValue
	deadline := time.After(5 * time.Second)
	for len(seen) < 2 {
		select {
		case u := <-ch:
			seen = append(seen, u.Values...)
		case <-deadline:
			t.Fatalf("watch delivered %v within 5 s, want the put and the delete", seen)
		}
	}
	if seen[0].Key != Key(80) || seen[0].Value == nil || seen[0].Revision != r1 {
		t.Errorf("first event %+v, want put of %s at %d", seen[0], Key(80), r1)
	}
	if seen[1].Key != Key(80) || seen[1].Value != nil || seen[1].Revision != r2 {
		t.Errorf("second event %+v, want delete of %s at %d", seen[1], Key(80), r2)
	}
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func endpointsOf(s *store.Store, port int) string {
	e, err := s.Get("10.0.0.10", port, "tcp")
	if err != nil {
		return ""
	}
	return fmt.Sprint(e.Rule.Endpoints[0].EndpointIP)
}

// testReplicas: two Stores on one backend location converge on every write
// either makes, deletes included.
func testReplicas(t *testing.T, loc Location) {
	a, b := newStore(t, open(t, loc)), newStore(t, open(t, loc))
	defer a.Close()
	defer b.Close()
	if _, _, err := a.Apply(Rule(80)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replica b to apply the create", func() bool { return endpointsOf(b, 80) == "10.1.0.1" })
	if _, _, err := b.Apply(Rule(80, "10.1.0.9")); err != nil {
		t.Fatalf("update through b: %v", err)
	}
	eventually(t, "replica a to apply the update", func() bool { return endpointsOf(a, 80) == "10.1.0.9" })
	if _, err := a.DeleteAll(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replica b to apply the delete", func() bool { return len(b.List()) == 0 })
	eventually(t, "both replicas at one revision", func() bool { return a.AppliedRevision() == b.AppliedRevision() })
}

// testReplicaConflict: concurrent updates of one rule through two replicas
// never lose one silently: exactly the writes that were acknowledged can be
// the final value, and every loser got 409.
func testReplicaConflict(t *testing.T, loc Location) {
	a, b := newStore(t, open(t, loc)), newStore(t, open(t, loc))
	defer a.Close()
	defer b.Close()
	if _, _, err := a.Apply(Rule(80)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "replica b to apply the create", func() bool { return endpointsOf(b, 80) == "10.1.0.1" })
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*store.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = s.Apply(Rule(80, fmt.Sprintf("10.2.0.%d", i+1)))
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		if err == nil {
			won++
			continue
		}
		e, ok := apierror.As(err)
		if !ok || e.Status != 409 {
			t.Fatalf("replica %d: %v, want success or 409", i, err)
		}
	}
	if won == 0 {
		t.Fatal("both concurrent writes failed")
	}
	final := func() string { return endpointsOf(a, 80) }
	eventually(t, "both replicas on one value", func() bool { return final() == endpointsOf(b, 80) && final() != "10.1.0.1" })
	if won == 1 {
		winner := "10.2.0.1"
		if errs[0] != nil {
			winner = "10.2.0.2"
		}
		if final() != winner {
			t.Fatalf("final value %s is not the acknowledged write %s", final(), winner)
		}
	}
}
