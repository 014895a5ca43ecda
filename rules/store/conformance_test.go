package store_test

import (
	"testing"

	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/storetest"
)

// TestFileBackendConformance runs the backend suite against the file store
// with its defaults (the write journal on; the etcd store runs the same
// suite in rules/store/etcdstore).
func TestFileBackendConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Location {
		dir := t.TempDir()
		return storetest.Location{Open: func(t *testing.T) store.Backend {
			b, err := store.OpenFileBackend(dir, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}}
	})
}

// TestFileBackendJournalConformance runs the same suite with the write
// journal on, compacting every few records so both paths are exercised.
func TestFileBackendJournalConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Location {
		dir := t.TempDir()
		return storetest.Location{Open: func(t *testing.T) store.Backend {
			b, err := store.OpenFileBackendJournal(dir, nil, nil, store.JournalOptions{Enabled: true, MaxRecords: 3})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}}
	})
}

// TestFileBackendRewriteConformance runs it with the journal off: every
// write rewrites rules.json.
func TestFileBackendRewriteConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Location {
		dir := t.TempDir()
		return storetest.Location{Open: func(t *testing.T) store.Backend {
			b, err := store.OpenFileBackendJournal(dir, nil, nil, store.JournalOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}}
	})
}
