package etcdstore_test

import (
	"os"
	"path/filepath"
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
