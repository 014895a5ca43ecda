package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
)

// FileBackend keeps the rule set in <dir>/rules.json (format in persist.go):
// each change is appended to <dir>/rules.journal and folded into rules.json
// at the journal's bounds (journal.go), or, with the journal off, rules.json
// is rewritten atomically on every change; with dir "" it keeps the set in
// memory only. It is the single-replica default: one process writes it, so
// revisions are a counter that restarts with the process, enough to give
// Commit the same compare-and-swap contract as the etcd backend.
type FileBackend struct {
	dir string
	now func() time.Time
	log logrus.FieldLogger

	mu     sync.Mutex
	loaded bool // the file was read; later Loads return memory (sole writer)
	rev    int64
	vals   map[string][]byte // BackendKey → wire JSON
	revs   map[string]int64  // BackendKey → revision of its last write

	// The write journal (journal.go).
	jopts JournalOptions
	jf    *os.File // open for appending once the first record is written
	jsize int64    // bytes in the journal
	jrecs int      // records in the journal
	// ageTimer runs the MaxAge compaction while the journal holds records;
	// ageGen tells a callback that fired late that it was cancelled.
	ageTimer *time.Timer
	ageGen   uint64
	seq      uint64 // sequence of the last record applied (snapshot or journal)
	broken   error  // set when a failed append could not be undone
	// replayedRecords counts journal records applied by the last load.
	replayedRecords int
	stopAt          compactStep // tests: stop a compaction at this step
}

// OpenFileBackend opens (and creates) dir; "" is a memory-only backend.
// Temp files a crash left mid-write are removed: their rename never
// happened, so they hold nothing that was acknowledged.
func OpenFileBackend(dir string, log logrus.FieldLogger, now func() time.Time) (*FileBackend, error) {
	return OpenFileBackendJournal(dir, log, now, DefaultJournalOptions())
}

// OpenFileBackendJournal is OpenFileBackend with the write journal
// configured by j (see JournalOptions; ignored for a memory-only backend).
func OpenFileBackendJournal(dir string, log logrus.FieldLogger, now func() time.Time, j JournalOptions) (*FileBackend, error) {
	if log == nil {
		log = logrus.StandardLogger()
	}
	if now == nil {
		now = time.Now
	}
	if dir != "" {
		if err := ensureStateDir(dir); err != nil {
			return nil, err
		}
		removeStaleTemps(dir, log)
	}
	j = j.withDefaults()
	if dir == "" {
		j.Enabled = false
	}
	return &FileBackend{dir: dir, now: now, log: log, vals: map[string][]byte{}, revs: map[string]int64{}, jopts: j}, nil
}

// Load reads rules.json. A corrupt file is quarantined and the set is empty
// (see loadState). A value whose rule cannot be decoded is returned with an
// empty Key so the Store rejects it with the reason.
func (b *FileBackend) Load(ctx context.Context) (Loaded, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loadLocked()
}

func (b *FileBackend) loadLocked() (Loaded, error) {
	if b.loaded {
		return b.memory(), nil
	}
	var raws []json.RawMessage
	var recs []journalRecord
	if b.dir != "" {
		var err error
		if raws, err = b.loadState(); err != nil {
			return Loaded{}, err
		}
		if recs, err = b.readJournal(b.seq); err != nil {
			return Loaded{}, fmt.Errorf("rules: %w", err)
		}
	}
	b.vals, b.revs, b.rev = map[string][]byte{}, map[string]int64{}, 0
	// The snapshot's values in file order; a value that is no valid rule or
	// repeats a key is still returned, so the Store rejects it by name.
	type slot struct {
		key string
		raw []byte
	}
	slots := make([]slot, 0, len(raws))
	for _, raw := range raws {
		key := keyOfValue(raw)
		if _, dup := b.vals[key]; !dup && key != "" {
			b.vals[key] = raw
		}
		slots = append(slots, slot{key, raw})
	}
	// The journal's changes over it, in order.
	inSnapshot := maps.Clone(b.vals)
	for _, r := range recs {
		for _, p := range r.Puts {
			b.vals[p.Key] = p.Value
		}
		for _, k := range r.Deletes {
			delete(b.vals, k)
		}
		b.seq = r.Seq
	}
	b.replayedRecords = len(recs)
	out := Loaded{Values: make([]StoredValue, 0, len(slots))}
	add := func(key string, raw []byte) {
		b.rev++
		if key != "" {
			if _, seen := b.revs[key]; !seen {
				b.revs[key] = b.rev
			}
		}
		out.Values = append(out.Values, StoredValue{Key: key, Value: raw, Revision: b.rev})
	}
	// A snapshot value the journal replaced is returned as its latest
	// value; one the journal deleted is not returned.
	for _, sl := range slots {
		if sl.key == "" {
			add(sl.key, sl.raw)
			continue
		}
		if cur, ok := b.vals[sl.key]; ok {
			if _, seen := b.revs[sl.key]; seen {
				add(sl.key, sl.raw) // a duplicate: the Store rejects it
			} else {
				add(sl.key, cur)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b.vals)) {
		if _, ok := inSnapshot[k]; !ok {
			add(k, b.vals[k])
		}
	}
	out.Revision = b.rev
	b.loaded = true
	if b.dir != "" {
		b.foldJournal()
	}
	return out, nil
}

// foldJournal compacts a non-empty journal found at load into rules.json,
// so the next boot replays nothing and a backend with the journal off never
// leaves one behind. A failure only costs replay time: it is logged.
func (b *FileBackend) foldJournal() {
	fi, err := os.Stat(b.journalPath())
	if err != nil || fi.Size() == 0 {
		return
	}
	if err := b.compact(b.vals); err != nil {
		b.log.WithFields(logrus.Fields{"path": b.journalPath(), "error": err}).
			Warn("could not fold the rule journal into the snapshot at load; it is replayed again next boot")
	}
}

// memory is the current set as this sole writer holds it.
func (b *FileBackend) memory() Loaded {
	out := Loaded{Revision: b.rev}
	for _, k := range slices.Sorted(maps.Keys(b.vals)) {
		out.Values = append(out.Values, StoredValue{Key: k, Value: b.vals[k], Revision: b.revs[k]})
	}
	return out
}

// keyOfValue is the BackendKey of a stored value, "" if it is no valid rule.
func keyOfValue(raw []byte) string {
	r, err := rules.DecodeJSON(raw)
	if err != nil {
		return ""
	}
	_, c, err := rules.Prepare(r)
	if err != nil {
		return ""
	}
	return BackendKey(c.Key)
}

// Commit checks every expected revision, then makes the change durable:
// one journal record when the journal is on, else a rewrite of the file.
func (b *FileBackend) Commit(ctx context.Context, c Change) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.loaded { // a write before any Load must not drop the file's rules
		if _, err := b.loadLocked(); err != nil {
			return 0, err
		}
	}
	if b.broken != nil {
		return 0, b.broken
	}
	for _, p := range c.Puts {
		if b.revs[p.Key] != p.Expect {
			return 0, RevisionConflict(p.Key, p.Expect)
		}
	}
	for _, d := range c.Deletes {
		if got, ok := b.revs[d.Key]; !ok || got != d.Expect {
			return 0, RevisionConflict(d.Key, d.Expect)
		}
	}
	if b.jopts.Enabled {
		return b.commitJournal(c)
	}
	vals := maps.Clone(b.vals)
	applyChange(vals, c)
	if err := b.writeSnapshot(vals); err != nil {
		return 0, err
	}
	b.vals = vals
	return b.committed(c), nil
}

// commitJournal appends c as one record and applies it in memory; it
// compacts when the journal has passed a bound. Caller holds b.mu.
func (b *FileBackend) commitJournal(c Change) (int64, error) {
	rec := journalRecord{Seq: b.seq + 1, Puts: make([]journalPut, len(c.Puts))}
	for i, p := range c.Puts {
		rec.Puts[i] = journalPut{Key: p.Key, Value: p.Value}
	}
	for _, d := range c.Deletes {
		rec.Deletes = append(rec.Deletes, d.Key)
	}
	if err := b.appendJournal(rec); err != nil {
		return 0, err
	}
	b.seq = rec.Seq
	applyChange(b.vals, c)
	rev := b.committed(c)
	if b.needsCompaction() {
		// The change is durable in the journal already: a failed
		// compaction is retried after the next write (or at MaxAge).
		if err := b.compact(b.vals); err != nil {
			b.log.WithFields(logrus.Fields{"path": b.journalPath(), "error": err}).
				Warn("could not compact the rule journal; will retry")
		}
	}
	b.armAgeCompaction()
	return rev, nil
}

// applyChange applies c's puts and deletes to vals.
func applyChange(vals map[string][]byte, c Change) {
	for _, p := range c.Puts {
		vals[p.Key] = p.Value
	}
	for _, d := range c.Deletes {
		delete(vals, d.Key)
	}
}

// committed advances the revision and records it for c's keys.
func (b *FileBackend) committed(c Change) int64 {
	b.rev++
	for _, p := range c.Puts {
		b.revs[p.Key] = b.rev
	}
	for _, d := range c.Deletes {
		delete(b.revs, d.Key)
	}
	return b.rev
}

// writeSnapshot durably replaces rules.json with vals in key order, stamped
// with the last journal sequence they include.
func (b *FileBackend) writeSnapshot(vals map[string][]byte) error {
	if b.dir == "" {
		return nil
	}
	keys := slices.Sorted(maps.Keys(vals))
	wires := make([][]byte, len(keys))
	for i, k := range keys {
		wires[i] = vals[k]
	}
	return writeFileAtomic(b.statePath(), encodeDoc(wires, b.seq))
}

// keepRejected saves values that failed replay to a rules.json.rejected-<ts>
// file and rewrites rules.json without them, so an operator can fix and
// re-POST them and the next boot does not trip over them again.
func (b *FileBackend) keepRejected(rejected []rejectedRule, accepted []string) error {
	if b.dir == "" {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.writeRejected(rejected); err != nil {
		return err
	}
	vals := make(map[string][]byte, len(accepted))
	for _, k := range accepted {
		vals[k] = b.vals[k]
	}
	if err := b.compact(vals); err != nil {
		return err
	}
	for k := range b.revs {
		if _, ok := vals[k]; !ok {
			delete(b.revs, k)
		}
	}
	b.vals = vals
	return nil
}

// Close folds a non-empty journal into rules.json (a clean shutdown leaves
// nothing to replay) and closes it. Every Commit is durable already, so a
// failure here loses nothing; it is returned for the log.
func (b *FileBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopAgeCompaction()
	if b.jf == nil {
		return nil
	}
	var err error
	if b.jsize > 0 && b.broken == nil {
		if err = b.compact(b.vals); err != nil {
			err = fmt.Errorf("rules: compact journal at close: %w", err)
		}
	}
	if cerr := b.jf.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("rules: close journal: %w", cerr)
	}
	b.jf = nil
	return err
}

var _ Backend = (*FileBackend)(nil)
