package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"time"

	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// This file holds the Store's side of the Backend contract: commits with
// compare-and-swap on the key's revision, and following a shared backend's
// watch through the same validate → compile → install path as a write.

// unreachableCommitTimeout bounds a write while the backend is known down.
const unreachableCommitTimeout = time.Second

// commitPut writes one rule version, expecting the key at prev's revision
// (or absent on create).
func (s *Store) commitPut(k spec.Key, nr rules.Rule, prev *Entry) (int64, error) {
	value, err := json.Marshal(nr)
	if err != nil {
		return 0, fmt.Errorf("encode rule %s: %w", k, err)
	}
	var expect int64
	if prev != nil {
		expect = prev.Revision
	}
	return s.commit(Change{Puts: []Put{{Key: BackendKey(k), Value: value, Expect: expect}}})
}

func (s *Store) commit(c Change) (int64, error) {
	timeout := s.opts.CommitTimeout
	if s.StoreHealth() != nil {
		// Known unreachable: answer 503 soon rather than hold the caller
		// (and the store's lock) for the whole budget.
		timeout = min(timeout, unreachableCommitTimeout)
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	return s.backend.Commit(ctx, c)
}

// commitError passes a backend's client error (409 revision_conflict, 503
// store_unavailable) through and reports anything else as persist_failed.
func commitError(err error) error {
	if _, ok := apierror.As(err); ok {
		return err
	}
	return persistError(err)
}

// noteCommitted records this process's own commit. With a Watcher backend
// the applied revision waits for the watch to reach it: other replicas'
// changes below rev may not be applied yet, and a replica must never report
// a revision it does not fully serve. Caller holds s.mu.
func (s *Store) noteCommitted(rev int64) {
	if _, shared := s.backend.(Watcher); !shared {
		s.noteApplied(rev)
	}
}

// noteApplied records that the served set reflects at least revision rev.
// Caller holds s.mu.
func (s *Store) noteApplied(rev int64) {
	if rev > s.applied.Load() {
		s.applied.Store(rev)
	}
}

// AppliedRevision is the backend revision the served rule set reflects
// (replicas that agree on it serve the same rules).
func (s *Store) AppliedRevision() int64 { return s.applied.Load() }

// Digest identifies the served set by its keys and store revisions:
// replicas with equal digests serve the same rules.
func (s *Store) Digest() string {
	h := xxhash.New()
	var buf [8]byte
	for _, e := range s.snap.Load().entries {
		h.WriteString(BackendKey(e.Compiled.Key))
		binary.BigEndian.PutUint64(buf[:], uint64(e.Revision))
		h.Write(buf[:])
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

// StoreHealth is nil while the backend is reachable (always, for the file).
func (s *Store) StoreHealth() error {
	if h, ok := s.backend.(HealthReporter); ok {
		return h.Health()
	}
	return nil
}

// Backend is the store's backend (the daemon reads its health and metrics).
func (s *Store) Backend() Backend { return s.backend }

// Close stops following the backend and closes it.
func (s *Store) Close() error {
	s.cancel()
	s.follow.Wait()
	return s.backend.Close()
}

// followWatch applies every update the backend delivers until Close.
func (s *Store) followWatch(w Watcher, after int64) {
	defer s.follow.Done()
	for u := range w.Watch(s.ctx, after) {
		s.applyUpdate(u)
	}
}

// applyUpdate applies one batch of watched changes. A change this replica
// made itself is already served (its revision is not newer) and skipped.
func (s *Store) applyUpdate(u Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.snap.Load()
	entries := slices.Clone(cur.entries)
	changed := false
	if u.Reset {
		present := make(map[string]bool, len(u.Values))
		for _, v := range u.Values {
			present[v.Key] = true
		}
		kept := entries[:0]
		for _, e := range entries {
			if present[BackendKey(e.Compiled.Key)] {
				kept = append(kept, e)
				continue
			}
			s.rt.Remove(e.Compiled)
			changed = true
			s.log.WithField("rule", e.Compiled.Key.String()).Info("rule deleted (resync)")
		}
		entries = kept
	}
	for _, v := range u.Values {
		var c bool
		entries, c = s.applyValueLocked(entries, v)
		changed = changed || c
	}
	s.noteApplied(u.Revision)
	if changed {
		s.lastGen++
		s.snap.Store(&snapshot{gen: s.lastGen, entries: entries})
	}
}

// applyValueLocked applies one watched put (Value != nil) or delete.
func (s *Store) applyValueLocked(entries []*Entry, v StoredValue) ([]*Entry, bool) {
	idx := slices.IndexFunc(entries, func(e *Entry) bool { return BackendKey(e.Compiled.Key) == v.Key })
	if v.Value == nil {
		if idx < 0 || entries[idx].Revision > v.Revision {
			return entries, false // gone already, or re-created after this delete
		}
		e := entries[idx]
		s.rt.Remove(e.Compiled)
		s.log.WithFields(logrus.Fields{"rule": e.Compiled.Key.String(), "revision": v.Revision}).
			Info("rule deleted (from store)")
		return slices.Delete(entries, idx, idx+1), true
	}
	if idx >= 0 && entries[idx].Revision >= v.Revision {
		return entries, false // this replica's own write, or already applied
	}
	l := s.log.WithFields(logrus.Fields{"key": v.Key, "revision": v.Revision})
	nr, next, err := s.decodeValue(v)
	if err != nil {
		l.WithError(err).Error("stored value refused; it is not applied (fix or delete it in the store)")
		return entries, false
	}
	var prev *Entry
	if idx >= 0 {
		prev = entries[idx]
		if err := rules.CheckUpdate(prev.Rule, nr); err != nil {
			if e, ok := apierror.As(err); ok && e.Code == apierror.CodeRuleExists {
				same := *prev              // published entries are immutable: copy, then change
				same.Revision = v.Revision // identical re-write
				entries[idx] = &same
				return entries, false
			}
			s.rejectedValue("immutable_field")
			l.WithError(err).Error("stored value changes an immutable field; it is not applied (delete and recreate the rule)")
			return entries, false
		}
	}
	s.lastGen++
	next.Generation = s.lastGen
	e := Entry{Rule: nr, Compiled: next, Revision: v.Revision}
	if err := s.rt.Install(served(prev), next); err != nil {
		s.rejectedValue("install_failed")
		if served(prev) != nil {
			l.WithError(err).Error("datapath refused a stored rule; keeping what was served")
			return entries, false
		}
		// Nothing served for this key: keep the rule, retry it later.
		l.WithError(err).Error("datapath refused a stored rule; kept and retried in the background")
		e.InstallError = installError(err, next.Key).Error()
		s.wakeInstaller()
	}
	outcome := Created
	if idx >= 0 {
		entries[idx] = &e
		outcome = Updated
	} else {
		at, _ := findKey(entries, next.Key)
		entries = slices.Insert(entries, at, &e)
	}
	l.WithFields(logrus.Fields{"rule": next.Key.String(), "outcome": outcome.String()}).Info("rule applied (from store)")
	return entries, true
}
