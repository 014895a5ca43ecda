package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestartKeepsRulesWithJournal: by default a write goes to
// rules.journal, a clean stop folds it into rules.json, and the next run
// serves the rule; with --rules-journal=false the write rewrites rules.json
// and no journal is written.
func TestRestartKeepsRulesWithJournal(t *testing.T) {
	for _, journal := range []bool{true, false} {
		name := map[bool]string{true: "journal", false: "rewrite"}[journal]
		t.Run(name, func(t *testing.T) {
			log, _ := testLogger()
			opts := DefaultOptions()
			if !opts.RulesJournal.Enabled {
				t.Fatal("the rules journal is not on by default")
			}
			opts.RulesJournal.Enabled = journal
			opts.StateDir = filepath.Join(t.TempDir(), "state")
			journalPath := filepath.Join(opts.StateDir, "rules.journal")
			statePath := filepath.Join(opts.StateDir, "rules.json")

			d := start(t, opts, log)
			createPersisted(t, d.base)
			fi, err := os.Stat(journalPath)
			if journaled := err == nil && fi.Size() > 0; journaled != journal {
				t.Fatalf("the write is in %s: %v (%v), want %v", journalPath, journaled, err, journal)
			}
			if !journal {
				if state, err := os.ReadFile(statePath); err != nil || !strings.Contains(string(state), `"persisted"`) {
					t.Fatalf("rules.json after a write with the journal off lacks the rule: %v", err)
				}
			}
			if err := d.stop(); err != nil {
				t.Fatalf("first run: %v", err)
			}
			if fi, err := os.Stat(journalPath); err == nil && fi.Size() != 0 {
				t.Errorf("%s holds %d bytes after a clean stop", journalPath, fi.Size())
			}
			state, err := os.ReadFile(statePath)
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
		})
	}
}
