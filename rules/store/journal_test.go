package store

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"
)

// journalOn is the journal enabled with bounds a test sets.
func journalOn(records int) JournalOptions {
	return JournalOptions{Enabled: true, MaxRecords: records}
}

// openJournalBackend opens a journaling file backend in dir and loads it.
func openJournalBackend(t *testing.T, dir string, j JournalOptions, log logrus.FieldLogger) *FileBackend {
	t.Helper()
	if log == nil {
		log = quietLog()
	}
	b, err := OpenFileBackendJournal(dir, log, nil, j)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

// crash drops b as a killed process would: the journal file is closed
// without the compaction a clean Close does.
func crash(b *FileBackend) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.jf != nil {
		b.jf.Close()
		b.jf = nil
	}
}

// ruleValue is rule i's wire JSON and key.
func ruleValue(t *testing.T, i, weight int) (string, []byte) {
	t.Helper()
	r := scaleRule(i)
	r.Endpoints[0].Weight = weight
	nr, c, err := rules.Prepare(r)
	if err != nil {
		t.Fatal(err)
	}
	v, err := json.Marshal(nr)
	if err != nil {
		t.Fatal(err)
	}
	return BackendKey(c.Key), v
}

// loadedSet is a backend's set as key → value.
func loadedSet(t *testing.T, b *FileBackend) map[string]string {
	t.Helper()
	l, err := b.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, v := range l.Values {
		out[v.Key] = string(v.Value)
	}
	return out
}

// commitSteps commits each step on its own and keeps want in step.
func commitSteps(t *testing.T, b *FileBackend, want map[string]string, steps []journalStep) {
	t.Helper()
	for _, st := range steps {
		k, v := ruleValue(t, st.rule, st.weight)
		var ch Change
		if st.weight == 0 {
			ch.Deletes = []Delete{{Key: k, Expect: b.revs[k]}}
			delete(want, k)
		} else {
			ch.Puts = []Put{{Key: k, Value: v, Expect: b.revs[k]}}
			want[k] = string(v)
		}
		if _, err := b.Commit(context.Background(), ch); err != nil {
			t.Fatalf("commit %+v: %v", st, err)
		}
	}
}

// journalStep puts rule with weight, or deletes it (weight 0).
type journalStep struct{ rule, weight int }

var journalScript = []journalStep{{1, 1}, {2, 1}, {3, 1}, {1, 0}, {2, 4}, {4, 1}}

// TestJournalTornRecord: a damaged last record (a crash mid-append) is
// dropped with a warning; every earlier record still applies, the journal
// is cut back to them, and the next write lands after them.
func TestJournalTornRecord(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(data []byte, last int) []byte // last = offset of the last record
		copied  bool                               // journal copied aside as corrupt
		lastRec bool                               // the last record survives
	}{
		{"cut in the payload", func(d []byte, _ int) []byte { return d[:len(d)-3] }, false, false},
		{"cut in the header", func(d []byte, last int) []byte { return d[:last+5] }, false, false},
		{"flipped payload byte", func(d []byte, _ int) []byte { d[len(d)-2] ^= 0x20; return d }, false, false},
		{"garbage after the records", func(d []byte, _ int) []byte {
			return append(d, []byte("\x02\x00\x00\x00XXXXjunk-and-more")...)
		}, true, true},
		{"sequence gap", func(d []byte, _ int) []byte {
			rec, err := encodeJournalRecord(journalRecord{Seq: 99, Deletes: []string{"10.200.0.2:20001|tcp"}})
			if err != nil {
				panic(err)
			}
			return append(d, rec...)
		}, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := openJournalBackend(t, dir, journalOn(100), nil)
			want := map[string]string{}
			commitSteps(t, b, want, journalScript[:len(journalScript)-1])
			before := maps.Clone(want)
			lastAt := int(b.jsize)
			commitSteps(t, b, want, journalScript[len(journalScript)-1:])
			crash(b)
			if !tc.lastRec {
				want = before
			}
			path := filepath.Join(dir, journalFileName)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(data, lastAt), 0o600); err != nil {
				t.Fatal(err)
			}
			log, hook := test.NewNullLogger()
			b2 := openJournalBackend(t, dir, journalOn(100), log)
			if got := loadedSet(t, b2); !reflect.DeepEqual(got, want) {
				t.Fatalf("after reopen:\n got %v\nwant %v", keysOf(got), keysOf(want))
			}
			if !slices.ContainsFunc(hook.AllEntries(), func(e *logrus.Entry) bool { return e.Level == logrus.WarnLevel }) {
				t.Error("no warning about the damaged record")
			}
			corrupt, _ := filepath.Glob(path + corruptSuffix + "*")
			if got := len(corrupt) == 1; got != tc.copied {
				t.Errorf("journal copied aside: %v (%v), want %v", got, corrupt, tc.copied)
			}
			// The store goes on: a new write survives another crash.
			commitSteps(t, b2, want, []journalStep{{5, 2}})
			crash(b2)
			b3 := openJournalBackend(t, dir, journalOn(100), nil)
			if got := loadedSet(t, b3); !reflect.DeepEqual(got, want) {
				t.Fatalf("after write and reopen:\n got %v\nwant %v", keysOf(got), keysOf(want))
			}
		})
	}
}

// TestJournalCompactionCrashPoints stops a compaction between its steps
// (as a crash would) and reopens: nothing is lost, and records the new
// snapshot holds are not applied again.
func TestJournalCompactionCrashPoints(t *testing.T) {
	tests := []struct {
		stop     compactStep
		replayed int // records replayed at the reopen
	}{
		{stepBeforeSnapshot, len(journalScript)},
		{stepAfterSnapshot, 0},
		{"", 0}, // the compaction completes
	}
	for _, tc := range tests {
		t.Run(cmp.Or(string(tc.stop), "completed"), func(t *testing.T) {
			dir := t.TempDir()
			b := openJournalBackend(t, dir, journalOn(100), nil)
			want := map[string]string{}
			commitSteps(t, b, want, journalScript)
			b.stopAt = tc.stop
			b.mu.Lock()
			err := b.compact(b.vals)
			b.mu.Unlock()
			if (err != nil) != (tc.stop != "") {
				t.Fatalf("compact: %v", err)
			}
			crash(b)
			b2 := openJournalBackend(t, dir, journalOn(100), nil)
			if b2.replayedRecords != tc.replayed {
				t.Errorf("replayed %d journal records, want %d", b2.replayedRecords, tc.replayed)
			}
			if got := loadedSet(t, b2); !reflect.DeepEqual(got, want) {
				t.Fatalf("after reopen:\n got %v\nwant %v", keysOf(got), keysOf(want))
			}
			if fi, err := os.Stat(filepath.Join(dir, journalFileName)); err == nil && fi.Size() != 0 {
				t.Errorf("journal not folded at load: %d bytes", fi.Size())
			}
			// Sequences go on from the snapshot: later writes replay.
			commitSteps(t, b2, want, []journalStep{{3, 0}, {6, 3}})
			crash(b2)
			b3 := openJournalBackend(t, dir, journalOn(100), nil)
			if b3.replayedRecords != 2 {
				t.Errorf("replayed %d journal records after two writes, want 2", b3.replayedRecords)
			}
			if got := loadedSet(t, b3); !reflect.DeepEqual(got, want) {
				t.Fatalf("after writes and reopen:\n got %v\nwant %v", keysOf(got), keysOf(want))
			}
		})
	}
}

// TestJournalOffFoldsAnExistingJournal: a backend with the journal off
// still replays one it finds, and folds it into rules.json.
func TestJournalOffFoldsAnExistingJournal(t *testing.T) {
	dir := t.TempDir()
	b := openJournalBackend(t, dir, journalOn(100), nil)
	want := map[string]string{}
	commitSteps(t, b, want, journalScript)
	crash(b)
	off := openJournalBackend(t, dir, DefaultJournalOptions(), nil)
	if got := loadedSet(t, off); !reflect.DeepEqual(got, want) {
		t.Fatalf("journal off:\n got %v\nwant %v", keysOf(got), keysOf(want))
	}
	if fi, err := os.Stat(filepath.Join(dir, journalFileName)); err == nil && fi.Size() != 0 {
		t.Errorf("journal left with %d bytes with the journal off", fi.Size())
	}
	commitSteps(t, off, want, []journalStep{{2, 0}})
	if got := loadedSet(t, openJournalBackend(t, dir, DefaultJournalOptions(), nil)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a write with the journal off:\n got %v\nwant %v", keysOf(got), keysOf(want))
	}
}

// TestJournalRandomWritesReopen: 300 random creates, updates and deletes
// through the Store, compacting every 17 records; after a crash, and after
// a clean Close, the reopened store holds exactly the set it served.
func TestJournalRandomWritesReopen(t *testing.T) {
	dir := t.TempDir()
	opts := Options{StateDir: dir, Log: quietLog(), Journal: journalOn(17)}
	s := openReadyWith(t, opts)
	rng := rand.New(rand.NewPCG(7, 24))
	for i := 0; i < 300; i++ {
		id := rng.IntN(25)
		r := scaleRule(id)
		switch op := rng.IntN(10); {
		case op < 6:
			r.Endpoints[0].Weight = 1 + rng.IntN(4)
			_, _, err := s.Apply(r)
			if ae, ok := apierror.As(err); err != nil && !(ok && ae.Code == apierror.CodeRuleExists) {
				t.Fatalf("write %d: apply: %v", i, err)
			}
		case op < 9:
			_, c, err := rules.Prepare(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(c.Key); err != nil {
				if ae, ok := apierror.As(err); !ok || ae.Code != apierror.CodeRuleNotFound {
					t.Fatalf("write %d: delete: %v", i, err)
				}
			}
		default:
			if _, err := s.DeleteByName(r.ServiceArguments.Name); err != nil {
				t.Fatalf("write %d: delete by name: %v", i, err)
			}
		}
	}
	want := listRules(s)
	if len(want) == 0 {
		t.Fatal("the random writes left nothing to check")
	}
	// Crash: the journal is left as it is.
	s.cancel()
	s.follow.Wait()
	crash(s.backend.(*FileBackend))

	s2 := openReadyWith(t, opts)
	if got := listRules(s2); !reflect.DeepEqual(got, want) {
		t.Fatalf("after crash and reopen: %d rules, want %d (sets differ)", len(got), len(want))
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	// A clean Close leaves everything in rules.json and an empty journal.
	if fi, err := os.Stat(filepath.Join(dir, journalFileName)); err == nil && fi.Size() != 0 {
		t.Errorf("journal holds %d bytes after a clean close", fi.Size())
	}
	if !reflect.DeepEqual(byName(persistedRules(t, dir)), byName(want)) {
		t.Error("rules.json after a clean close differs from the served set")
	}
	s3 := openReadyWith(t, opts)
	defer s3.Close()
	if got := listRules(s3); !reflect.DeepEqual(got, want) {
		t.Fatalf("after close and reopen: %d rules, want %d (sets differ)", len(got), len(want))
	}
}

// TestJournalWriteLeavesSnapshot: with the journal on, a write appends one
// record and leaves rules.json alone until a bound is passed.
func TestJournalWriteLeavesSnapshot(t *testing.T) {
	dir := t.TempDir()
	b := openJournalBackend(t, dir, journalOn(3), nil)
	want := map[string]string{}
	commitSteps(t, b, want, journalScript[:2])
	if _, err := os.Stat(filepath.Join(dir, stateFileName)); !os.IsNotExist(err) {
		t.Fatalf("rules.json written before the journal's bound: %v", err)
	}
	if b.jrecs != 2 {
		t.Fatalf("journal holds %d records, want 2", b.jrecs)
	}
	commitSteps(t, b, want, journalScript[2:3]) // third record: compaction
	if b.jrecs != 0 || b.jsize != 0 {
		t.Fatalf("journal not compacted at its bound: %d records, %d bytes", b.jrecs, b.jsize)
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFileName))
	if err != nil {
		t.Fatal(err)
	}
	raws, seq, reason := decodeState(data)
	if reason != "" || seq != 3 || len(raws) != len(want) {
		t.Fatalf("snapshot: %d rules, journal_seq %d, %q; want %d rules, seq 3", len(raws), seq, reason, len(want))
	}
}

func keysOf(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// byName indexes rules by name (rules.json is in key-string order, List in
// address order).
func byName(rs []rules.Rule) map[string]rules.Rule {
	out := make(map[string]rules.Rule, len(rs))
	for _, r := range rs {
		out[r.ServiceArguments.Name] = r
	}
	return out
}

// TestJournalFailedAppend: an append that fails and cannot be undone (the
// journal's descriptor is gone) fails the write and every later one, and
// the next boot sees only acknowledged writes.
func TestJournalFailedAppend(t *testing.T) {
	dir := t.TempDir()
	b := openJournalBackend(t, dir, journalOn(100), nil)
	want := map[string]string{}
	commitSteps(t, b, want, journalScript[:2])
	b.jf.Close() // every write and truncate on it now fails
	for i := range 2 {
		k, v := ruleValue(t, 9, 1)
		if _, err := b.Commit(context.Background(), Change{Puts: []Put{{Key: k, Value: v}}}); err == nil {
			t.Fatalf("write %d succeeded on a broken journal", i)
		}
	}
	if b.broken == nil {
		t.Error("backend not marked broken after an append it could not undo")
	}
	b.jf = nil
	if got := loadedSet(t, openJournalBackend(t, dir, journalOn(100), nil)); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen:\n got %v\nwant %v", keysOf(got), keysOf(want))
	}
}

// TestJournalMaxAgeCompacts: with no size bound reached, a write reaches
// rules.json within MaxAge of being acknowledged, and the next write starts
// the clock again.
func TestJournalMaxAgeCompacts(t *testing.T) {
	dir := t.TempDir()
	b := openJournalBackend(t, dir, JournalOptions{Enabled: true, MaxRecords: 100, MaxAge: 20 * time.Millisecond}, nil)
	defer b.Close()
	want := map[string]string{}
	for _, steps := range [][]journalStep{journalScript[:3], journalScript[3:]} {
		commitSteps(t, b, want, steps)
		waitSnapshot(t, dir, want)
		b.mu.Lock()
		recs, armed := b.jrecs, b.ageTimer != nil
		b.mu.Unlock()
		if recs != 0 || armed {
			t.Fatalf("after the age compaction: %d records in the journal, timer armed %v", recs, armed)
		}
	}
}

// waitSnapshot waits (up to 5 s) for rules.json to hold exactly want.
func waitSnapshot(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	var got map[string]string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		data, err := os.ReadFile(filepath.Join(dir, stateFileName))
		if err != nil {
			continue
		}
		raws, _, reason := decodeState(data)
		if reason != "" {
			t.Fatalf("rules.json unsound: %s", reason)
		}
		got = map[string]string{}
		for _, raw := range raws {
			got[keyOfValue(raw)] = string(raw)
		}
		if reflect.DeepEqual(got, want) {
			return
		}
	}
	t.Fatalf("rules.json not compacted within 5 s of a 20 ms bound:\n got %v\nwant %v", keysOf(got), keysOf(want))
}

// TestJournalIsTheDefault: a file backend opened with the defaults
// journals a write instead of rewriting rules.json.
func TestJournalIsTheDefault(t *testing.T) {
	dir := t.TempDir()
	b, err := OpenFileBackend(dir, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	commitSteps(t, b, map[string]string{}, journalScript[:1])
	if fi, err := os.Stat(filepath.Join(dir, journalFileName)); err != nil || fi.Size() == 0 {
		t.Fatalf("the write is not in the journal: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFileName)); !os.IsNotExist(err) {
		t.Fatalf("rules.json rewritten by a journaled write: %v", err)
	}
}
