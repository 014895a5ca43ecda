package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestartKeepsRulesWithJournal: with --rules-journal a write goes to
// rules.journal, a clean stop folds it into rules.json, and the next run
// serves the rule.
func TestRestartKeepsRulesWithJournal(t *testing.T) {
	log, _ := testLogger()
	opts := DefaultOptions()
	opts.StateDir = filepath.Join(t.TempDir(), "state")
	opts.RulesJournal.Enabled = true
	journal := filepath.Join(opts.StateDir, "rules.journal")

	d := start(t, opts, log)
	createPersisted(t, d.base)
	if fi, err := os.Stat(journal); err != nil || fi.Size() == 0 {
		t.Fatalf("the write is not in %s: %v", journal, err)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("first run: %v", err)
	}
	if fi, err := os.Stat(journal); err == nil && fi.Size() != 0 {
		t.Errorf("%s holds %d bytes after a clean stop", journal, fi.Size())
	}
	state, err := os.ReadFile(filepath.Join(opts.StateDir, "rules.json"))
	if err != nil || !strings.Contains(string(state), `"persisted"`) {
		t.Fatalf("rules.json after a clean stop lacks the rule: %v", err)
	}

	d2 := start(t, opts, log)
	if got := names(listRules(t, d2.base)); len(got) != 1 || got[0] != "persisted" {
		t.Fatalf("rules after restart = %v, want [persisted]", got)
	}
	if err := d2.stop(); err != nil {
		t.Fatalf("second run: %v", err)
	}
}
