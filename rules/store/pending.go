package store

import (
	"slices"
	"time"

	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// A stored rule the datapath refuses at boot or from the watch (its
// certificate is not there yet, its VIP address is not up yet) is not
// dropped: it stays in the set with Entry.InstallError, reported not ready,
// and the installer below tries it again with backoff until it serves. A
// write or delete of that key meanwhile works as on any rule.

// served is what the datapath serves for e: its compiled rule, or nil when
// e is absent or pending.
func served(e *Entry) *spec.Rule {
	if e == nil || e.InstallError != "" {
		return nil
	}
	return e.Compiled
}

// wakeInstaller makes the installer try the pending rules now.
func (s *Store) wakeInstaller() {
	select {
	case s.retry <- struct{}{}:
	default:
	}
}

// installPending retries pending rules until Close: first after
// ReplayRetryDelay, doubling to MaxInstallRetryDelay while some stay
// pending, and at once when the watch adds one.
func (s *Store) installPending() {
	defer s.follow.Done()
	delay := s.opts.ReplayRetryDelay
	for {
		t := time.NewTimer(delay)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-s.retry:
			delay = s.opts.ReplayRetryDelay
		case <-t.C:
		}
		t.Stop()
		if s.retryPendingOnce() == 0 {
			delay = s.opts.ReplayRetryDelay
			// Nothing left: sleep until the watch adds a pending rule.
			select {
			case <-s.ctx.Done():
				return
			case <-s.retry:
			}
			continue
		}
		delay = min(delay*2, s.opts.MaxInstallRetryDelay)
	}
}

// retryPendingOnce tries every pending rule once and publishes those that
// now serve; it returns how many are still pending.
func (s *Store) retryPendingOnce() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.snap.Load()
	var entries []*Entry // cur's entries, cloned at the first change
	setError := func(i int, msg string) {
		if entries == nil {
			entries = slices.Clone(cur.entries)
		}
		ne := *cur.entries[i] // published entries are immutable: copy, then change
		ne.InstallError = msg
		entries[i] = &ne
	}
	left := 0
	for i, e := range cur.entries {
		if e.InstallError == "" {
			continue
		}
		if err := s.rt.Install(nil, e.Compiled); err != nil {
			left++
			if msg := installError(err, e.Compiled.Key).Error(); msg != e.InstallError {
				setError(i, msg)
			}
			continue
		}
		setError(i, "")
		s.log.WithField("rule", e.Compiled.Key.String()).Info("pending rule installed; now served")
	}
	if entries != nil {
		s.lastGen++
		s.snap.Store(&snapshot{gen: s.lastGen, entries: entries})
	}
	if left > 0 {
		s.log.WithFields(logrus.Fields{"pending": left}).Debug("stored rules still not served; retrying")
	}
	return left
}

// Pending counts the stored rules the datapath does not serve yet.
func (s *Store) Pending() int {
	n := 0
	for _, e := range s.snap.Load().entries {
		if e.InstallError != "" {
			n++
		}
	}
	return n
}
