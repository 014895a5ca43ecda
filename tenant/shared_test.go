package tenant

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/infergate/infergate/apierror"
)

// memShared is an in-memory Persister whose watch never fires, so a
// registry on it is a replica that has not yet heard of others' writes.
type memShared struct {
	mu   sync.Mutex
	data []byte
	rev  int64
}

var errStale = errors.New("stale")

func (m *memShared) Load(context.Context) ([]byte, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data, m.rev, nil
}

func (m *memShared) Save(_ context.Context, data []byte, rev int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev != m.rev {
		return 0, errStale
	}
	m.data, m.rev = append([]byte(nil), data...), m.rev+1
	return m.rev, nil
}

func (m *memShared) Watch(func([]byte, int64)) {}

// TestSharedStaleWrite: a replica that missed another's write is refused
// 409 revision_conflict, loses nothing of the other's write, and its retry
// succeeds on top of it.
func TestSharedStaleWrite(t *testing.T) {
	m := &memShared{}
	a, err := Open(Options{Shared: m})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(Options{Shared: m})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(KeySpec{TenantID: "t", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err = b.Create(KeySpec{TenantID: "t", Name: "b"})
	if e, ok := apierror.As(err); !ok || e.Code != apierror.CodeRevisionConflict || e.Status != 409 {
		t.Fatalf("stale write: %v, want 409 revision_conflict", err)
	}
	if got := b.List("t"); len(got) != 1 || got[0].Name != "a" {
		t.Fatalf("after the conflict B holds %+v, want A's key", got)
	}
	if _, err := b.Create(KeySpec{TenantID: "t", Name: "b"}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	c, err := Open(Options{Shared: m})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.List("t"); len(got) != 2 {
		t.Fatalf("the shared document holds %d keys, want 2", len(got))
	}
}

// downShared fails its first Load (etcd not reachable at boot) and hands
// its watch callback to the test.
type downShared struct {
	memShared
	watch func([]byte, int64)
}

func (d *downShared) Load(ctx context.Context) ([]byte, int64, error) {
	if d.watch == nil {
		return nil, 0, errors.New("unreachable")
	}
	return d.memShared.Load(ctx)
}

func (d *downShared) Watch(fn func([]byte, int64)) { d.watch = fn }

// TestSharedUnreachableAtBoot: the registry opens empty and takes the
// document when the watch delivers it.
func TestSharedUnreachableAtBoot(t *testing.T) {
	m := &memShared{}
	a, err := Open(Options{Shared: m})
	if err != nil {
		t.Fatal(err)
	}
	k, err := a.Create(KeySpec{TenantID: "t", Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	d := &downShared{}
	b, err := Open(Options{Shared: d})
	if err != nil {
		t.Fatalf("open with the store unreachable: %v", err)
	}
	if _, den := b.Admit(Check{Key: k.RawKey}); den == nil {
		t.Fatal("a key admitted before the store was read")
	}
	data, rev, _ := m.Load(context.Background())
	d.watch(data, rev)
	if _, den := b.Admit(Check{Key: k.RawKey}); den != nil {
		t.Fatalf("after the watch delivered the document: %+v", den)
	}
}

// TestApplyRetriesRace: replicas booting with the same --rules race on the
// shared document; the loser's ApplyKey re-reads and goes on.
func TestApplyRetriesRace(t *testing.T) {
	m := &memShared{}
	a, _ := Open(Options{Shared: m})
	b, _ := Open(Options{Shared: m}) // never hears of a's writes but by re-reading
	if _, err := a.SetTenantLimit(TenantLimit{TenantID: "t", RPS: new(3)}); err != nil {
		t.Fatal(err)
	}
	mint, _ := Mint()
	spec := KeySpec{TenantID: "t", Name: "n", KeyID: mint.ID, KeyHash: mint.Hash.String()}
	if o, err := ApplyKey(context.Background(), b.Local(), spec); err != nil || o != OutcomeCreated {
		t.Fatalf("raced apply: %q %v, want created after a retry", o, err)
	}
	c, _ := Open(Options{Shared: m})
	if len(c.List("t")) != 1 || len(c.TenantLimits("t")) != 1 {
		t.Fatalf("shared document lost a write: keys %v limits %v", c.List("t"), c.TenantLimits("t"))
	}
}
