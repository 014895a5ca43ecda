package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/rules/store/storetest"
)

// TestMigrateRoundTrip: file → etcd → a new file gives the same rules; a
// second run copies nothing; an invalid value is reported, not copied.
func TestMigrateRoundTrip(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dir := t.TempDir()
	src := newFileStore(t, dir)
	for _, p := range []int{80, 81, 82} {
		if _, _, err := src.Apply(storetest.Rule(p)); err != nil {
			t.Fatal(err)
		}
	}
	src.Close()
	fb := openFile(t, dir)
	eb := openBackend(t, c.Endpoints(), "/migrate")
	defer eb.Close()
	put(t, c.Client(t), "/migrate/rules/junk", "{}")
	rep, err := store.Migrate(ctx, fb, eb)
	if err != nil || rep.Copied != 3 {
		t.Fatalf("file → etcd: %+v %v", rep, err)
	}
	if rep, err = store.Migrate(ctx, fb, eb); err != nil || rep.Copied != 0 || rep.Unchanged != 3 {
		t.Fatalf("second run: %+v %v", rep, err)
	}
	out := openFile(t, t.TempDir())
	rep, err = store.Migrate(ctx, eb, out)
	if err != nil || rep.Copied != 3 || len(rep.Skipped) != 1 {
		t.Fatalf("etcd → file: %+v %v", rep, err)
	}
	l, err := out.Load(ctx)
	if err != nil || len(l.Values) != 3 {
		t.Fatalf("destination file holds %d values (%v)", len(l.Values), err)
	}
}

func openFile(t testing.TB, dir string) *store.FileBackend {
	t.Helper()
	b, err := store.OpenFileBackend(dir, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newFileStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	o := store.DefaultOptions()
	o.StateDir = dir
	o.Log = quietLog()
	s, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}
