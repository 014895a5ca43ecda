package etcdstore_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/tenant"
)

// TestSharedTenantKeys: two replicas' key registries on one etcd document
// (etcdstore.Blob): a key made through one works on the other, changes
// and deletes travel both ways, a stale write is refused 409
// revision_conflict and loses nothing, and the first replica on a new
// store carries its state directory's keys over.
func TestSharedTenantKeys(t *testing.T) {
	c := etcdtest.Start(t, 1)
	dirA := t.TempDir()
	// Replica A had a key in its state directory before the shared store.
	local, err := tenant.Open(tenant.Options{StateDir: dirA})
	if err != nil {
		t.Fatal(err)
	}
	old, err := local.Create(tenant.KeySpec{TenantID: "t", Name: "old"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dirA, "apikeys.json")); err != nil {
		t.Fatal(err)
	}
	open := func(dir string) *tenant.Registry {
		b := openBackend(t, c.Endpoints(), "/keys")
		t.Cleanup(func() { _ = b.Close() })
		r, err := tenant.Open(tenant.Options{StateDir: dir, Shared: b.Blob("tenant/apikeys"), Log: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := open(dirA), open(t.TempDir())
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if ok() {
				return
			}
		}
		t.Fatalf("timed out waiting for %s", what)
	}
	admits := func(r *tenant.Registry, raw string) bool { _, d := r.Admit(tenant.Check{Key: raw}); return d == nil }
	if !admits(b, old.RawKey) {
		t.Fatal("B does not know the key A migrated from its state directory")
	}
	k, err := a.Create(tenant.KeySpec{TenantID: "t", Name: "new"})
	if err != nil {
		t.Fatal(err)
	}
	eventually("A's new key on B", func() bool { return admits(b, k.RawKey) })
	if _, err := b.Patch(k.KeyID, tenant.KeyPatch{Enabled: new(false)}); err != nil {
		t.Fatal(err)
	}
	eventually("B's disable on A", func() bool { v, _ := a.Get(k.KeyID); return !v.Enabled })
	if err := a.Delete(old.KeyID); err != nil {
		t.Fatal(err)
	}
	eventually("A's delete on B", func() bool { _, err := b.Get(old.KeyID); return err != nil })

	// A stale writer: C opened at the current revision, then A writes.
	cReg := open(t.TempDir())
	if _, err := a.SetTenantLimit(tenant.TenantLimit{TenantID: "t", RPS: new(5)}); err != nil {
		t.Fatal(err)
	}
	// C may or may not have seen A's write yet; either way its write must
	// not undo A's.
	_, err = cReg.Create(tenant.KeySpec{TenantID: "t", Name: "from-c"})
	if e, ok := apierror.As(err); err != nil && (!ok || e.Code != apierror.CodeRevisionConflict) {
		t.Fatalf("stale write: %v, want success or 409 revision_conflict", err)
	}
	eventually("both writes on B", func() bool {
		return len(b.TenantLimits("t")) == 1 && (err != nil || len(b.List("t")) == 2)
	})
}

// TestGarbageTenantDocumentDoesNotStopABoot: a replica that starts while
// <prefix>/tenant/apikeys is garbage boots with no keys (keyed rules refuse:
// fail closed), reports why, refuses key writes rather than overwrite the
// document, and takes the keys once the document is repaired.
func TestGarbageTenantDocumentDoesNotStopABoot(t *testing.T) {
	c := etcdtest.Start(t, 1)
	dir := t.TempDir()
	good, err := tenant.Open(tenant.Options{StateDir: dir, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	k, err := good.Create(tenant.KeySpec{TenantID: "t", Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	repaired, err := os.ReadFile(filepath.Join(dir, "apikeys.json")) // the same document form
	if err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	ctx := t.Context()
	if _, err := cli.Put(ctx, "/keys/tenant/apikeys", "garbage"); err != nil {
		t.Fatal(err)
	}
	b := openBackend(t, c.Endpoints(), "/keys")
	t.Cleanup(func() { _ = b.Close() })
	var health []error
	var mu sync.Mutex
	r, err := tenant.Open(tenant.Options{Shared: b.Blob("tenant/apikeys"), Log: quietLog(),
		OnSharedHealth: func(err error) { mu.Lock(); health = append(health, err); mu.Unlock() }})
	if err != nil {
		t.Fatalf("a garbage key document stopped the boot: %v", err)
	}
	if r.SharedProblem() == "" {
		t.Fatal("the unreadable key document is not reported")
	}
	if _, d := r.Admit(tenant.Check{Key: k.RawKey}); d == nil {
		t.Fatal("a key was admitted while the key document is unreadable")
	}
	if _, err := r.Create(tenant.KeySpec{TenantID: "t", Name: "other"}); err == nil {
		t.Fatal("a key write overwrote the unreadable document")
	}
	if got, _ := cli.Get(ctx, "/keys/tenant/apikeys"); string(got.Kvs[0].Value) != "garbage" {
		t.Fatalf("the document was changed: %q", got.Kvs[0].Value)
	}
	if _, err := cli.Put(ctx, "/keys/tenant/apikeys", string(repaired)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, d := r.Admit(tenant.Check{Key: k.RawKey}); d == nil && r.SharedProblem() == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the repaired key document was not taken: %q", r.SharedProblem())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(health) != 2 || health[0] == nil || health[1] != nil {
		t.Fatalf("health reports %v, want [unreadable, readable]", health)
	}
}
