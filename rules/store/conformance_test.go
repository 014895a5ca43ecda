package store_test

import (
	"testing"

	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/storetest"
)

// runFileConformance runs the backend suite against file backends opened
// by open in a fresh directory per case (the etcd store runs the same
// suite in rules/store/etcdstore).
func runFileConformance(t *testing.T, open func(dir string) (*store.FileBackend, error)) {
	storetest.Run(t, func(t *testing.T) storetest.Location {
		dir := t.TempDir()
		return storetest.Location{Open: func(t *testing.T) store.Backend {
			b, err := open(dir)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}}
	})
}

// TestFileBackendConformance runs the suite against the file store with
// its defaults (the write journal on).
func TestFileBackendConformance(t *testing.T) {
	runFileConformance(t, func(dir string) (*store.FileBackend, error) {
		return store.OpenFileBackend(dir, nil, nil)
	})
}

// TestFileBackendJournalConformance runs the same suite with the write
// journal on, compacting every few records so both paths are exercised.
func TestFileBackendJournalConformance(t *testing.T) {
	runFileConformance(t, func(dir string) (*store.FileBackend, error) {
		return store.OpenFileBackendJournal(dir, nil, nil, store.JournalOptions{Enabled: true, MaxRecords: 3})
	})
}

// TestFileBackendRewriteConformance runs it with the journal off: every
// write rewrites rules.json.
func TestFileBackendRewriteConformance(t *testing.T) {
	runFileConformance(t, func(dir string) (*store.FileBackend, error) {
		return store.OpenFileBackendJournal(dir, nil, nil, store.JournalOptions{})
	})
}
