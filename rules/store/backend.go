package store

import (
	"context"
	"fmt"
	"net/http"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
)

// Backend is where a Store keeps its rules durably. Two implementations
// exist: the local file (FileBackend, the embedded default for one replica)
// and etcd (rules/store/etcdstore, shared by several replicas). Both keep one value
// per rule — the rule's normalised wire JSON — under its BackendKey, each with
// a revision that changes on every write, and both pass the conformance
// suite in rules/store/storetest.
//
// The Store never trusts what a Backend returns: every value goes through
// decode → validate → compile → install, exactly like an API write.
type Backend interface {
	// Load returns every stored value and the revision the set reflects.
	Load(ctx context.Context) (Loaded, error)
	// Commit applies one change atomically and durably and returns the
	// revision it was committed at. Every Put and Delete names the revision
	// it expects the key to have (0: the key must not exist); if any key
	// differs, nothing is written and the error is a 409
	// revision_conflict. A backend that cannot be reached answers 503
	// store_unavailable. On error nothing changed.
	Commit(ctx context.Context, c Change) (int64, error)
	// Close releases the backend's resources.
	Close() error
}

// Watcher is a Backend other processes write to as well: Watch delivers
// their changes (and this process's own) after revision after, in order,
// until ctx ends. The backend resumes from the last delivered revision
// after a disconnect, and sends a Reset update (the complete set) when it
// could not (e.g. the revision was compacted).
type Watcher interface {
	Watch(ctx context.Context, after int64) <-chan Update
}

// HealthReporter is a Backend that can be unreachable while the process
// keeps serving; Health is nil while it is reachable.
type HealthReporter interface {
	Health() error
}

// StoredValue is one key of a Backend.
type StoredValue struct {
	Key      string // BackendKey of the rule (as the backend holds it)
	Value    []byte // the rule's wire JSON; nil in a delete event
	Revision int64  // revision of the key's last change
}

// Loaded is a Backend's complete set at Revision.
type Loaded struct {
	Values   []StoredValue
	Revision int64
}

// Put writes Value under Key if the key is at revision Expect (0: absent).
type Put struct {
	Key    string
	Value  []byte
	Expect int64
}

// Delete removes Key if it is at revision Expect.
type Delete struct {
	Key    string
	Expect int64
}

// Change is one atomic write.
type Change struct {
	Puts    []Put
	Deletes []Delete
}

// Update is what a Watcher delivers: the changes up to Revision. With Reset,
// Values is the complete set and every key not in it is gone.
type Update struct {
	Revision int64
	Values   []StoredValue
	Reset    bool
}

// BackendKey is the key a rule is stored under in every backend, e.g.
// "10.0.0.1:80|tcp" or "10.0.0.1:80|tcp|host=a.example". It is Key.String()
// of the normalised key, so an operator writing a rule straight into etcd
// can spell it, and a value whose key does not match its rule is refused.
func BackendKey(k spec.Key) string { return rules.NormalizeKey(k).String() }

// RevisionConflict is the 409 a Backend returns when a key moved under a
// write: another replica (or a direct write) changed the rule since this
// process read it.
func RevisionConflict(key string, expected int64) *apierror.Error {
	return apierror.Conflict(apierror.CodeRevisionConflict, "", rules.ResultRuleExists,
		fmt.Sprintf("rule %s was changed concurrently (expected store revision %d); re-read it and retry", key, expected))
}

// Unavailable is the 503 a Backend returns when it cannot commit; the
// API adds Retry-After.
func Unavailable(err error) *apierror.Error {
	return &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.CodeStoreUnavailable,
		Result: "store unavailable", Message: "the rule store cannot be reached; the change was not made, retry later", Err: err}
}
