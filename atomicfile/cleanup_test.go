package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRemoveTempsKeepsTheFileAndOthers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "apikeys.json")
	files := map[string]bool{ // name → removed
		"apikeys.json":             false,
		".apikeys.json.tmp-123":    true,
		".apikeys.json.tmp-abc":    true,
		".rules.json.tmp-1":        false,
		"apikeys.json.tmp-1":       false,
		".apikeys.json.rejected-1": false,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := RemoveTemps(path)
	if err != nil || n != 2 {
		t.Fatalf("RemoveTemps = %d, %v; want 2", n, err)
	}
	for name, removed := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone := os.IsNotExist(err); gone != removed {
			t.Errorf("%s: removed %v, want %v", name, gone, removed)
		}
	}
}
