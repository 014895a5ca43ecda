package store

import (
	"context"
	"testing"

	"github.com/infergate/infergate/spec"
)

// batchRuntime records how rules were removed.
type batchRuntime struct {
	NopRuntime
	single  int
	batches [][]*spec.Rule
}

func (b *batchRuntime) Remove(*spec.Rule)          { b.single++ }
func (b *batchRuntime) RemoveMany(rs []*spec.Rule) { b.batches = append(b.batches, rs) }

// TestDeleteAllRemovesInOneBatch: deleting several rules hands them to a
// BatchRemover runtime at once; deleting one removes it alone.
func TestDeleteAllRemovesInOneBatch(t *testing.T) {
	rt := &batchRuntime{}
	s, err := Open(Options{Runtime: rt, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	var keys []spec.Key
	for i := range 3 {
		_, c, err := s.Apply(withPort(plainRule(), 3000+i))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, c.Key)
	}
	if err := s.Delete(keys[0]); err != nil {
		t.Fatal(err)
	}
	if rt.single != 1 || len(rt.batches) != 0 {
		t.Fatalf("one delete: %d single removals, %d batches; want 1, 0", rt.single, len(rt.batches))
	}
	if n, err := s.DeleteAll(); err != nil || n != 2 {
		t.Fatalf("DeleteAll = %d, %v", n, err)
	}
	if rt.single != 1 || len(rt.batches) != 1 || len(rt.batches[0]) != 2 {
		t.Fatalf("DeleteAll: %d single removals, batches %v; want one batch of 2", rt.single, rt.batches)
	}
}
