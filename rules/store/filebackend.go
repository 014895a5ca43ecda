package store

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
)

// FileBackend keeps the rule set in <dir>/rules.json (format in persist.go),
// rewritten atomically on every change; with dir "" it keeps it in memory
// only. It is the single-replica default: one process writes it, so
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
}

// OpenFileBackend opens (and creates) dir; "" is a memory-only backend.
// Temp files a crash left mid-write are removed: their rename never
// happened, so they hold nothing that was acknowledged.
func OpenFileBackend(dir string, log logrus.FieldLogger, now func() time.Time) (*FileBackend, error) {
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
	return &FileBackend{dir: dir, now: now, log: log, vals: map[string][]byte{}, revs: map[string]int64{}}, nil
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
	if b.dir != "" {
		var err error
		if raws, err = b.loadState(); err != nil {
			return Loaded{}, err
		}
	}
	b.vals, b.revs, b.rev = map[string][]byte{}, map[string]int64{}, 0
	out := Loaded{Values: make([]StoredValue, 0, len(raws))}
	for _, raw := range raws {
		b.rev++
		key := keyOfValue(raw)
		if _, dup := b.vals[key]; !dup && key != "" {
			b.vals[key] = raw
			b.revs[key] = b.rev
		}
		out.Values = append(out.Values, StoredValue{Key: key, Value: raw, Revision: b.rev})
	}
	out.Revision = b.rev
	b.loaded = true
	return out, nil
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

// Commit checks every expected revision, then rewrites the file once.
func (b *FileBackend) Commit(ctx context.Context, c Change) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.loadLocked(); err != nil { // a write before any Load must not drop the file's rules
		return 0, err
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
	vals := maps.Clone(b.vals)
	for _, p := range c.Puts {
		vals[p.Key] = p.Value
	}
	for _, d := range c.Deletes {
		delete(vals, d.Key)
	}
	if err := b.write(vals); err != nil {
		return 0, err
	}
	b.rev++
	b.vals = vals
	for _, p := range c.Puts {
		b.revs[p.Key] = b.rev
	}
	for _, d := range c.Deletes {
		delete(b.revs, d.Key)
	}
	return b.rev, nil
}

// write durably replaces rules.json with vals in key order.
func (b *FileBackend) write(vals map[string][]byte) error {
	if b.dir == "" {
		return nil
	}
	keys := slices.Sorted(maps.Keys(vals))
	wires := make([][]byte, len(keys))
	for i, k := range keys {
		wires[i] = vals[k]
	}
	return writeFileAtomic(b.statePath(), encodeDoc(wires))
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
	if err := b.write(vals); err != nil {
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

// Close does nothing: every Commit is already durable.
func (b *FileBackend) Close() error { return nil }

var _ Backend = (*FileBackend)(nil)
