package rules_test

import (
	"testing"

	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/storetest"
)

// TestFileBackendConformance runs the backend suite against the file store
// (the etcd store runs the same suite in rules/etcdstore).
func TestFileBackendConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Location {
		dir := t.TempDir()
		return storetest.Location{Open: func(t *testing.T) rules.Backend {
			b, err := rules.OpenFileBackend(dir, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}}
	})
}
