package tenant

import (
	"fmt"
	"os"
	"path/filepath"
)

// Why a last-good copy: with a shared key store, a replica's keys live in
// etcd only. If the shared document turns unreadable (a bad put), running
// replicas keep the keys in memory, but a replica that restarts would have
// nothing to keep and would refuse every keyed request until an operator
// repairs the document. Each replica with a state directory therefore keeps
// a private copy of the last shared version it could read, and boots from
// it when the shared one does not parse. The copy holds what the shared
// document holds (salted hashes, never raw keys) and is written 0600.

// lastGoodFileName is the copy in the state directory.
const lastGoodFileName = "apikeys.shared-last-good.json"

func (r *Registry) lastGoodPath() string { return filepath.Join(r.opts.StateDir, lastGoodFileName) }

// keepsLastGood reports whether this registry keeps a last-good copy: only
// a shared registry with a state directory.
func (r *Registry) keepsLastGood() bool { return r.opts.Shared != nil && r.opts.StateDir != "" }

// saveLastGood records data, a shared version that parsed (empty: the
// document was deleted, so the last good state is no keys and the copy
// goes). A failure is logged and otherwise ignored: the copy is a
// fallback, not the store.
func (r *Registry) saveLastGood(data []byte) {
	if !r.keepsLastGood() {
		return
	}
	if len(data) == 0 {
		if err := os.Remove(r.lastGoodPath()); err != nil && !os.IsNotExist(err) {
			r.log.WithError(err).Warn("tenant: cannot remove the last-good copy of the shared key store")
		}
		return
	}
	if err := r.writePrivate(r.lastGoodPath(), data); err != nil {
		r.log.WithError(err).Warn("tenant: cannot keep a last-good copy of the shared key store")
	}
}

// loadLastGood parses the last-good copy; ok is false when there is none
// or it does not parse either.
func (r *Registry) loadLastGood(empty *snapshot) (s *snapshot, ok bool) {
	if !r.keepsLastGood() {
		return nil, false
	}
	data, err := os.ReadFile(r.lastGoodPath())
	if err != nil || len(data) == 0 {
		return nil, false
	}
	s, err = r.parse(data, empty)
	if err != nil {
		r.log.WithError(err).WithField("file", r.lastGoodPath()).Warn("tenant: last-good copy of the shared key store does not parse either")
		return nil, false
	}
	return s, true
}

// lastGoodError is why the shared document is not in force while the
// last-good copy serves.
func (r *Registry) lastGoodError(err error) error {
	return fmt.Errorf("%w; serving the last good keys this replica read (%s) until it is fixed", err, r.lastGoodPath())
}
