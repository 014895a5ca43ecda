package tenant

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// watchedShared is memShared whose watch callback the test drives.
type watchedShared struct {
	memShared
	watches []func([]byte, int64)
}

func (w *watchedShared) Watch(fn func([]byte, int64)) { w.watches = append(w.watches, fn) }

// put replaces the document behind the registries' backs (an operator's
// etcdctl put) and delivers it to the registry watching.
func (w *watchedShared) put(data string) {
	w.mu.Lock()
	w.data, w.rev = []byte(data), w.rev+1
	d, rev := w.data, w.rev
	w.mu.Unlock()
	for _, fn := range w.watches {
		fn(d, rev)
	}
}

// TestRestartWithGarbageSharedDocumentServesLastGoodKeys: a replica that
// restarts while the shared key document is garbage boots with the last
// version it read (its state directory's copy), reports why, refuses key
// writes rather than overwrite the document, and takes the repaired
// document from its watch. Without a copy it serves no keys (fail closed).
func TestRestartWithGarbageSharedDocumentServesLastGoodKeys(t *testing.T) {
	m := &watchedShared{}
	dir := t.TempDir()
	first, err := Open(Options{StateDir: dir, Shared: m})
	if err != nil {
		t.Fatal(err)
	}
	k, err := first.Create(KeySpec{TenantID: "t", Name: "k"})
	if err != nil {
		t.Fatal(err)
	}
	good, _, _ := m.Load(context.Background())
	if st, err := os.Stat(filepath.Join(dir, lastGoodFileName)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("last-good copy: %v (mode %v), want a 0600 file", err, st)
	}
	m.put("garbage")

	var health []error
	again, err := Open(Options{StateDir: dir, Shared: m, OnSharedHealth: func(err error) { health = append(health, err) }})
	if err != nil {
		t.Fatalf("a garbage key document stopped the boot: %v", err)
	}
	if _, d := again.Admit(Check{Key: k.RawKey}); d != nil {
		t.Fatalf("the last good key is refused after a restart: %+v", d)
	}
	if p := again.SharedProblem(); !strings.Contains(p, "last good keys") {
		t.Fatalf("SharedProblem = %q, want the reason and that the last good keys serve", p)
	}
	if _, err := again.Create(KeySpec{TenantID: "t", Name: "other"}); err == nil {
		t.Fatal("a key write overwrote the unreadable document")
	}
	if got, _, _ := m.Load(context.Background()); string(got) != "garbage" {
		t.Fatalf("the document was changed: %q", got)
	}

	// Without a copy (another state directory): no keys, fail closed.
	fresh, err := Open(Options{StateDir: t.TempDir(), Shared: m})
	if err != nil {
		t.Fatal(err)
	}
	if _, d := fresh.Admit(Check{Key: k.RawKey}); d == nil {
		t.Fatal("a replica without a last-good copy admitted a key while the document is garbage")
	}

	// Repaired without the key: the copy is not preferred over the store.
	m.put(`{"keys":[],"tenants":[]}`)
	if _, d := again.Admit(Check{Key: k.RawKey}); d == nil || again.SharedProblem() != "" {
		t.Fatalf("after the repair: admitted %v, problem %q; want the repaired (empty) document in force", d == nil, again.SharedProblem())
	}
	if len(health) != 2 || health[0] == nil || health[1] != nil {
		t.Fatalf("health reports %v, want [unreadable, readable]", health)
	}
	m.put(string(good))
	if _, d := again.Admit(Check{Key: k.RawKey}); d != nil {
		t.Fatalf("the key put back is refused: %+v", d)
	}
}
