package rules

// CONTRACT STUB written by the lead so api/ and cli/ can compile in parallel.
// The rules helper replaces the bodies (and may add fields/methods) but must
// keep these exported signatures.

import (
	"context"

	"github.com/infergate/infergate/datapath/spec"
	"github.com/sirupsen/logrus"
)

// Runtime is what serves compiled rules (the datapath). The store calls it
// inside its critical section, so a rule that cannot be served (address in
// use, not local) is never committed. Two implementations exist: the datapath
// and a no-op used when the daemon runs without serving (and in tests).
type Runtime interface {
	// Install starts serving next, replacing prev (nil on create). An error
	// leaves the runtime exactly as it was.
	Install(prev, next *spec.Rule) error
	// Remove stops serving r and drains its in-flight requests.
	Remove(r *spec.Rule)
}

// Outcome says what an Apply did.
type Outcome int

const (
	Created Outcome = iota
	Updated
	Unchanged
)

// Entry is a stored rule: its normalised wire form and its compiled object.
type Entry struct {
	Rule     Rule
	Compiled *spec.Rule
}

// StoreOptions configures a Store.
type StoreOptions struct {
	StateDir string  // where rules.json is persisted; "" = memory only
	Runtime  Runtime // nil = no-op
	Log      logrus.FieldLogger
}

// Store holds the rule set, applies changes atomically and persists them.
type Store struct{}

// OpenStore creates a store. It does not replay persisted rules: call Replay.
func OpenStore(opts StoreOptions) (*Store, error) { panic("rules: stub") }

// Replay loads the persisted rule set through full validation. Until it
// returns, Ready reports false and mutating calls fail with CodeNotReady.
func (s *Store) Replay(ctx context.Context) error { panic("rules: stub") }

// Ready reports whether boot replay has finished.
func (s *Store) Ready() bool { panic("rules: stub") }

// Apply is LoxiLB's upsert: create a new key, update a changed one, and fail
// an identical re-POST with 409 rule_exists (Outcome Unchanged).
func (s *Store) Apply(r Rule) (Outcome, *spec.Rule, error) { panic("rules: stub") }

// List returns every rule in a stable order (VIP, port, protocol, rest of key).
func (s *Store) List() []Entry { panic("rules: stub") }

// Get returns the first rule on vip:port/proto (LoxiLB's lookup by key).
func (s *Store) Get(vip string, port int, proto string) (Entry, error) { panic("rules: stub") }

// Delete removes the rule with exactly this key (404 rule_not_found if none).
func (s *Store) Delete(k spec.Key) error { panic("rules: stub") }

// DeleteByName removes every rule named name and returns how many.
func (s *Store) DeleteByName(name string) (int, error) { panic("rules: stub") }

// DeleteAll removes every rule and returns how many.
func (s *Store) DeleteAll() (int, error) { panic("rules: stub") }
