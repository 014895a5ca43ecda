package store

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStateModes: the file backend tightens a 0755 state dir to 0700, and a replay
// tightens a 0644 rules.json to 0600; nothing is ever loosened.
func TestStateModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	doc, err := encodeState(nil)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, stateFileName)
	if err := os.WriteFile(state, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := OpenFileBackend(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.loadState(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, state: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
	if err := tightenMode(state, 0o644); err != nil { // never loosens
		t.Fatal(err)
	}
	if fi, _ := os.Stat(state); fi.Mode().Perm() != 0o600 {
		t.Errorf("tightenMode loosened %s to %v", state, fi.Mode().Perm())
	}
}
