package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/infergate/infergate/atomicfile"
	"github.com/sirupsen/logrus"
)

// On-disk state: <StateDir>/rules.json holds
// {"schema_version":1,"rules":[<wire rule>...],"checksum":"sha256:<hex>"}
// where the checksum covers the compact JSON of the rules array.
const (
	stateFileName      = "rules.json"
	stateSchemaVersion = 1
	checksumPrefix     = "sha256:"
	corruptSuffix      = ".corrupt-"
	rejectedSuffix     = ".rejected-"
	stateFileMode      = 0o600
	stateDirMode       = 0o700
	fieldSchemaVersion = "schema_version"
	fieldRules         = "rules"
	fieldChecksum      = "checksum"
)

type stateFile struct {
	SchemaVersion int             `json:"schema_version"`
	Rules         json.RawMessage `json:"rules"`
	Checksum      string          `json:"checksum"`
	// JournalSeq is the last journal record folded into this snapshot
	// (journal.go); absent when no journal was ever written.
	JournalSeq uint64 `json:"journal_seq,omitempty"`
}

type rejectedRule struct {
	Rule  json.RawMessage `json:"rule"`
	Error string          `json:"error"`
}

type rejectedFile struct {
	SchemaVersion int            `json:"schema_version"`
	Rejected      []rejectedRule `json:"rejected"`
}

// ensureStateDir creates dir 0700, and tightens an existing one that an
// older install or a careless mkdir left readable by others: the rule set
// names every backend.
func ensureStateDir(dir string) error {
	if err := os.MkdirAll(dir, stateDirMode); err != nil {
		return fmt.Errorf("create state dir %s: %w", dir, err)
	}
	return tightenMode(dir, stateDirMode)
}

// tightenMode removes every permission bit of path beyond want (it never
// adds any). A symlink is followed: the target is what holds the data.
func tightenMode(path string, want fs.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode().Perm()&^want == 0 {
		return nil
	}
	if err := os.Chmod(path, fi.Mode().Perm()&want); err != nil {
		return fmt.Errorf("restrict %s to %v: %w", path, want, err)
	}
	return nil
}

// removeStaleTemps deletes temp files a crash left mid-write; the rename
// never happened, so they hold nothing that was acknowledged.
func removeStaleTemps(dir string, log logrus.FieldLogger) {
	if _, err := atomicfile.RemoveTemps(filepath.Join(dir, stateFileName)); err != nil {
		log.WithError(err).Warn("cannot remove stale temp file")
	}
}

func (b *FileBackend) statePath() string { return filepath.Join(b.dir, stateFileName) }

// encodeState encodes entries as a state document (tests, tools).
func encodeState(entries []Entry) ([]byte, error) {
	wires := make([][]byte, len(entries))
	for i := range entries {
		b, err := json.Marshal(entries[i].Rule)
		if err != nil {
			return nil, fmt.Errorf("encode rule set: %w", err)
		}
		wires[i] = b
	}
	return encodeDoc(wires, 0), nil
}

// encodeDoc assembles the state document around the compact rules array;
// the checksum covers exactly the bytes written as "rules". seq is the last
// journal sequence it holds (left out when 0, so a store that never
// journaled writes today's bytes).
func encodeDoc(wires [][]byte, seq uint64) []byte {
	n := 190
	for _, w := range wires {
		n += len(w) + 1
	}
	doc := make([]byte, 0, n)
	doc = append(doc, `{"`+fieldSchemaVersion+`":`...)
	doc = strconv.AppendInt(doc, stateSchemaVersion, 10)
	doc = append(doc, `,"`+fieldRules+`":`...)
	start := len(doc)
	doc = append(doc, '[')
	for i, w := range wires {
		if i > 0 {
			doc = append(doc, ',')
		}
		doc = append(doc, w...)
	}
	doc = append(doc, ']')
	sum := sha256.Sum256(doc[start:])
	doc = append(doc, `,"`+fieldChecksum+`":"`+checksumPrefix...)
	doc = hex.AppendEncode(doc, sum[:])
	doc = append(doc, '"')
	if seq > 0 {
		doc = append(doc, `,"`+fieldJournalSeq+`":`...)
		doc = strconv.AppendUint(doc, seq, 10)
	}
	return append(doc, '}')
}

// writeFileAtomic replaces a state file (mode stateFileMode) crash-safely.
func writeFileAtomic(path string, data []byte) error {
	return atomicfile.Write(path, data, stateFileMode)
}

// loadState reads rules.json and returns each persisted rule's raw JSON. A
// missing file is an empty set; an unreadable, unparsable or checksum-failing
// file is quarantined (renamed rules.json.corrupt-<unix ts>) and boot
// continues empty, so one bad write never blocks the daemon from starting.
func (b *FileBackend) loadState() ([]json.RawMessage, error) {
	path := b.statePath()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rules: read %s: %w", path, err)
	}
	if err := tightenMode(path, stateFileMode); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	raws, seq, reason := decodeState(data)
	if reason == "" {
		b.seq = seq
		return raws, nil
	}
	dst, qerr := b.sideFile(stateFileName, corruptSuffix)
	if qerr == nil {
		qerr = os.Rename(path, dst)
	}
	if qerr != nil {
		return nil, fmt.Errorf("rules: %s is corrupt (%s) and could not be quarantined: %w", path, reason, qerr)
	}
	if err := atomicfile.SyncDir(b.dir); err != nil {
		return nil, fmt.Errorf("rules: quarantine %s: %w", path, err)
	}
	b.log.WithFields(logrus.Fields{"path": path, "quarantined_to": dst, "reason": reason}).
		Error("persisted rule set is corrupt; quarantined it and starting with no rules")
	return nil, nil
}

// decodeState parses a state document and returns its rules and journal
// sequence; reason is "" when it is sound.
func decodeState(data []byte) (raws []json.RawMessage, seq uint64, reason string) {
	var doc stateFile
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, 0, "not a valid state document: " + err.Error()
	}
	if doc.SchemaVersion != stateSchemaVersion {
		return nil, 0, "unsupported " + fieldSchemaVersion + " " + strconv.Itoa(doc.SchemaVersion)
	}
	if len(doc.Rules) == 0 {
		return nil, 0, "missing " + fieldRules
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, doc.Rules); err != nil {
		return nil, 0, "rules are not valid JSON: " + err.Error()
	}
	sum := sha256.Sum256(compact.Bytes())
	if want := checksumPrefix + hex.EncodeToString(sum[:]); doc.Checksum != want {
		return nil, 0, fmt.Sprintf("%s mismatch: file says %q, content hashes to %q", fieldChecksum, doc.Checksum, want)
	}
	if err := json.Unmarshal(doc.Rules, &raws); err != nil {
		return nil, 0, "rules is not an array: " + err.Error()
	}
	return raws, doc.JournalSeq, ""
}

// sideFile picks <file><suffix><unix ts> in the state dir (file is
// rules.json or rules.journal), adding .N if that name exists.
func (b *FileBackend) sideFile(file, suffix string) (string, error) {
	base := filepath.Join(b.dir, file) + suffix + strconv.FormatInt(b.now().Unix(), 10)
	name := base
	for n := 1; n < 1000; n++ {
		if _, err := os.Lstat(name); errors.Is(err, fs.ErrNotExist) {
			return name, nil
		}
		name = base + "." + strconv.Itoa(n)
	}
	return "", fmt.Errorf("no free name for %s", base)
}

func (b *FileBackend) writeRejected(rejected []rejectedRule) error {
	data, err := json.MarshalIndent(rejectedFile{SchemaVersion: stateSchemaVersion, Rejected: rejected}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode rejected rules: %w", err)
	}
	path, err := b.sideFile(stateFileName, rejectedSuffix)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(path, data); err != nil {
		return fmt.Errorf("save rejected rules: %w", err)
	}
	b.log.WithFields(logrus.Fields{"path": path, "count": len(rejected)}).
		Warn("rules that failed replay were saved; fix and re-POST them")
	return nil
}
