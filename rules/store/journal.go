package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/infergate/infergate/atomicfile"
	"github.com/sirupsen/logrus"
)

// The journal lets a rule write cost the size of the change instead of the
// size of the rule set: each Commit appends one fsynced record to
// <StateDir>/rules.journal, and rules.json (the snapshot) is rewritten only
// when the journal passes a bound (records, bytes, or the age of its oldest
// record), at boot after a replay and at Close. So rules.json, the file
// operators and tools read, lacks an acknowledged write for at most MaxAge
// (less when MaxRecords or MaxBytes come first; a compaction that fails is
// logged and retried), and holds every write after a clean stop.
//
// A record is an 8-byte header — payload length and CRC-32C of the payload,
// both little-endian uint32 — then the payload, the JSON of journalRecord.
// Every record carries the next sequence number; rules.json carries the
// sequence of the last record folded into it ("journal_seq"), so records
// at or below it are skipped at replay. That makes the two steps of a
// compaction (replace rules.json, then truncate the journal) safe to
// interrupt: before the rename the old snapshot plus the whole journal is
// the state; after it the new snapshot already holds every record.
//
// A record that is cut short or fails its checksum (a crash mid-append) ends
// the replay: it and anything after it are dropped with a warning and the
// journal is cut back to the last good record, so earlier state is never
// touched. If bytes followed the bad record the journal is first copied to
// rules.journal.corrupt-<ts> for inspection.
const (
	journalFileName    = "rules.journal"
	journalHeaderSize  = 8
	journalMaxRecord   = 64 << 20 // a larger length is damage, not a record
	fieldJournalSeq    = "journal_seq"
	defaultJournalSize = 4 << 20
	defaultJournalRecs = 1000
	defaultJournalAge  = 5 * time.Second
)

var journalCRC = crc32.MakeTable(crc32.Castagnoli)

// JournalOptions configures the file backend's write journal.
type JournalOptions struct {
	// Enabled appends each write to rules.journal instead of rewriting
	// rules.json (the default). Off, every write rewrites rules.json whole;
	// an existing journal is still replayed at load and folded into
	// rules.json, so turning it off never loses a write.
	Enabled bool `yaml:"rules-journal"`
	// MaxBytes compacts the journal into rules.json once it grows past
	// this size (0 = 4 MiB).
	MaxBytes int64 `yaml:"rules-journal-max-bytes"`
	// MaxRecords compacts it after this many records (0 = 1000).
	MaxRecords int `yaml:"rules-journal-max-records"`
	// MaxAge compacts it this long after the first record rules.json does
	// not hold yet (0 = 5 s): a quiet store's rules.json is current.
	MaxAge time.Duration `yaml:"rules-journal-max-age"`
}

// DefaultJournalOptions is the journal on, with its default bounds.
func DefaultJournalOptions() JournalOptions {
	return JournalOptions{Enabled: true, MaxBytes: defaultJournalSize, MaxRecords: defaultJournalRecs, MaxAge: defaultJournalAge}
}

func (o JournalOptions) withDefaults() JournalOptions {
	if o.MaxBytes <= 0 {
		o.MaxBytes = defaultJournalSize
	}
	if o.MaxRecords <= 0 {
		o.MaxRecords = defaultJournalRecs
	}
	if o.MaxAge <= 0 {
		o.MaxAge = defaultJournalAge
	}
	return o
}

// journalRecord is one committed Change.
type journalRecord struct {
	Seq     uint64       `json:"seq"`
	Puts    []journalPut `json:"puts,omitempty"`
	Deletes []string     `json:"deletes,omitempty"`
}

type journalPut struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

func (b *FileBackend) journalPath() string { return filepath.Join(b.dir, journalFileName) }

// encodeJournalRecord frames rec: length, CRC-32C, payload.
func encodeJournalRecord(rec journalRecord) ([]byte, error) {
	payload, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode journal record %d: %w", rec.Seq, err)
	}
	out := make([]byte, journalHeaderSize, journalHeaderSize+len(payload))
	binary.LittleEndian.PutUint32(out[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(out[4:8], crc32.Checksum(payload, journalCRC))
	return append(out, payload...), nil
}

// decodeJournal returns the sound records of data in order, the offset
// just past each, and the offset past the last of them; bad is why decoding
// stopped early ("" when data ended cleanly).
func decodeJournal(data []byte) (recs []journalRecord, ends []int, good int, bad string) {
	for off := 0; off < len(data); {
		if len(data)-off < journalHeaderSize {
			return recs, ends, off, fmt.Sprintf("record at offset %d: header cut short", off)
		}
		n := int(binary.LittleEndian.Uint32(data[off : off+4]))
		sum := binary.LittleEndian.Uint32(data[off+4 : off+8])
		if n > journalMaxRecord || len(data)-off-journalHeaderSize < n {
			return recs, ends, off, fmt.Sprintf("record at offset %d: length %d runs past the end", off, n)
		}
		payload := data[off+journalHeaderSize : off+journalHeaderSize+n]
		if crc32.Checksum(payload, journalCRC) != sum {
			return recs, ends, off, fmt.Sprintf("record at offset %d: checksum mismatch", off)
		}
		var rec journalRecord
		if err := json.Unmarshal(payload, &rec); err != nil {
			return recs, ends, off, fmt.Sprintf("record at offset %d: %v", off, err)
		}
		off += journalHeaderSize + n
		recs = append(recs, rec)
		ends = append(ends, off)
	}
	return recs, ends, len(data), ""
}

// readJournal loads the journal's records after seq base, cutting a damaged
// tail off the file. It returns the records to apply in order.
func (b *FileBackend) readJournal(base uint64) ([]journalRecord, error) {
	path := b.journalPath()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	recs, ends, good, bad := decodeJournal(data)
	torn := bad != "" && isTornTail(data[good:])
	// Records must follow the snapshot without a gap; one that does not
	// cannot be trusted, nor anything after it.
	var apply []journalRecord
	next := base + 1
	for i, r := range recs {
		if r.Seq <= base {
			continue
		}
		if r.Seq != next {
			bad = fmt.Sprintf("record %d has sequence %d, want %d", i, r.Seq, next)
			good, torn = 0, false
			if i > 0 {
				good = ends[i-1]
			}
			break
		}
		apply = append(apply, r)
		next++
	}
	if bad == "" {
		return apply, nil
	}
	l := b.log.WithFields(logrus.Fields{"path": path, "reason": bad, "kept_bytes": good, "dropped_bytes": len(data) - good})
	if !torn {
		dst, qerr := b.sideFile(journalFileName, corruptSuffix)
		if qerr == nil {
			qerr = atomicfile.Write(dst, data, stateFileMode)
		}
		if qerr != nil {
			return nil, fmt.Errorf("journal %s is damaged (%s) and could not be copied aside: %w", path, bad, qerr)
		}
		l = l.WithField("copied_to", dst)
	}
	if err := truncateSync(path, int64(good)); err != nil {
		return nil, fmt.Errorf("cut damaged tail of %s: %w", path, err)
	}
	l.Warn("rule journal ends in a damaged record (a crash mid-write?); dropped it and what follows")
	return apply, nil
}

// isTornTail reports whether tail is what an interrupted append leaves: one
// record's worth of bytes (its header says it is longer than what is there).
func isTornTail(tail []byte) bool {
	if len(tail) < journalHeaderSize {
		return true
	}
	n := int(binary.LittleEndian.Uint32(tail[0:4]))
	return n <= journalMaxRecord && len(tail)-journalHeaderSize <= n
}

// truncateSync durably cuts the file at path to size bytes.
func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return truncateFile(f, size)
}

// truncateFile durably cuts f to size bytes.
func truncateFile(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

// openJournal opens the journal for appending (creating it durably).
func (b *FileBackend) openJournal() error {
	if b.jf != nil {
		return nil
	}
	path := b.journalPath()
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, stateFileMode)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	if err := tightenMode(path, stateFileMode); err != nil {
		f.Close()
		return err
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		if err := atomicfile.SyncDir(b.dir); err != nil {
			f.Close()
			return err
		}
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("stat %s: %w", path, err)
	}
	b.jf, b.jsize = f, fi.Size()
	return nil
}

// appendJournal writes rec durably. On failure the journal is cut back to
// where it was, so a record that was not acknowledged cannot reappear at
// the next boot; if even that fails the backend refuses further writes.
func (b *FileBackend) appendJournal(rec journalRecord) error {
	if err := b.openJournal(); err != nil {
		return err
	}
	frame, err := encodeJournalRecord(rec)
	if err != nil {
		return err
	}
	_, werr := b.jf.Write(frame)
	if werr == nil {
		werr = b.jf.Sync()
	}
	if werr != nil {
		if terr := b.jf.Truncate(b.jsize); terr != nil {
			b.broken = fmt.Errorf("journal %s holds a record that failed (%v) and could not be removed: %w", b.journalPath(), werr, terr)
		} else if serr := b.jf.Sync(); serr != nil {
			b.broken = fmt.Errorf("journal %s: sync after a failed append: %w", b.journalPath(), serr)
		}
		return fmt.Errorf("append to %s: %w", b.journalPath(), werr)
	}
	b.jsize += int64(len(frame))
	b.jrecs++
	return nil
}

// compactStep names the points of a compaction a test can stop at.
type compactStep string

const (
	stepBeforeSnapshot compactStep = "before-snapshot" // nothing written yet
	stepAfterSnapshot  compactStep = "after-snapshot"  // rules.json replaced, journal not cut
)

var errStopped = errors.New("compaction stopped (test)")

// compact folds the journal into a new rules.json and empties the journal:
// the snapshot (stamped with the last sequence) first, then the truncation.
func (b *FileBackend) compact(vals map[string][]byte) error {
	if b.stopAt == stepBeforeSnapshot {
		return errStopped
	}
	if err := b.writeSnapshot(vals); err != nil {
		return err
	}
	if b.stopAt == stepAfterSnapshot {
		return errStopped
	}
	// Truncated, not removed: a writer that still has it open goes on
	// appending to the file the next boot reads.
	var err error
	if b.jf != nil {
		err = truncateFile(b.jf, 0)
	} else if err = truncateSync(b.journalPath(), 0); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("truncate %s: %w", b.journalPath(), err)
	}
	b.jsize, b.jrecs = 0, 0
	b.stopAgeCompaction()
	return nil
}

// needsCompaction says whether the journal has passed a size bound.
func (b *FileBackend) needsCompaction() bool {
	return b.jsize > b.jopts.MaxBytes || b.jrecs >= b.jopts.MaxRecords
}

// armAgeCompaction schedules a compaction MaxAge from now unless one is
// scheduled already: the first record rules.json lacks starts the clock.
// Caller holds b.mu.
func (b *FileBackend) armAgeCompaction() {
	if b.ageTimer != nil || b.jsize == 0 {
		return
	}
	gen := b.ageGen
	b.ageTimer = time.AfterFunc(b.jopts.MaxAge, func() { b.compactAged(gen) })
}

// stopAgeCompaction cancels the scheduled compaction; a callback already
// waiting for b.mu sees the generation moved and does nothing. Caller
// holds b.mu.
func (b *FileBackend) stopAgeCompaction() {
	if b.ageTimer != nil {
		b.ageTimer.Stop()
		b.ageTimer = nil
	}
	b.ageGen++
}

// compactAged is the MaxAge compaction armed at generation gen. A backend
// closed or compacted since has nothing to do; a failure is retried MaxAge
// later.
func (b *FileBackend) compactAged(gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if gen != b.ageGen {
		return
	}
	b.ageTimer = nil
	if b.jf == nil || b.jsize == 0 || b.broken != nil {
		return
	}
	if err := b.compact(b.vals); err != nil {
		b.log.WithFields(logrus.Fields{"path": b.journalPath(), "error": err}).
			Warn("could not compact the rule journal; will retry")
		b.armAgeCompaction()
	}
}
