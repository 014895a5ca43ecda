package rules

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/apierror"
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

// NopRuntime serves nothing; it lets the store run without a datapath.
type NopRuntime struct{}

func (NopRuntime) Install(prev, next *spec.Rule) error { return nil }
func (NopRuntime) Remove(r *spec.Rule)                 {}

// Outcome says what an Apply did.
type Outcome int

const (
	Created Outcome = iota
	Updated
	Unchanged
)

func (o Outcome) String() string {
	switch o {
	case Created:
		return "created"
	case Updated:
		return "updated"
	case Unchanged:
		return "unchanged"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Entry is a stored rule: its normalised wire form and its compiled object,
// compiled from that form, so Compiled.Endpoints[i] is Rule.Endpoints[i].
// Both are shared with the store's snapshot: treat them as read-only.
type Entry struct {
	Rule     Rule
	Compiled *spec.Rule
}

// StoreOptions configures a Store.
type StoreOptions struct {
	StateDir string  // where rules.json is persisted; "" = memory only
	Runtime  Runtime // nil = no-op
	Log      logrus.FieldLogger
	// Now is the clock used for quarantine file names (tests pin it).
	Now func() time.Time
	// ReplayInstallAttempts bounds how often replay retries Runtime.Install
	// for one rule (0 = default 5). A restart can race the old process for a
	// port; without retries that rule would be dropped from the set.
	ReplayInstallAttempts int
	// ReplayRetryDelay is the pause between those attempts (0 = 200 ms).
	ReplayRetryDelay time.Duration
}

// DefaultStoreOptions returns options for a memory-only store with no
// datapath; the daemon sets StateDir and Runtime.
func DefaultStoreOptions() StoreOptions {
	return StoreOptions{Runtime: NopRuntime{}, Log: logrus.StandardLogger(), Now: time.Now,
		ReplayInstallAttempts: 5, ReplayRetryDelay: 200 * time.Millisecond}
}

// Result texts LoxiLB returns for store-level conflicts (reference §3.1).
const (
	resultRuleExists     = "lbrule-exists error"
	resultEngineChange   = "lbrule-exist error: cant modify rule kv engine type (delete and recreate)"
	resultSecurityChange = "lbrule-exist error: cant modify rule security mode"
	resultEgressChange   = "lbrule-exist error: cant modify rule egress mode"
	resultModeChange     = "lbrule-exist error: cant modify fullproxy rule mode"
	resultSecIPChange    = "secIP modify error"
	resultNoRule         = "no-rule error"
)

// snapshot is an immutable view of the rule set, published after each commit
// so reads never wait for a mutation (which may be fsyncing).
type snapshot struct {
	gen     uint64
	entries []Entry // sorted by key
}

// Store holds the rule set, applies changes atomically and persists them.
//
// Every mutation runs under mu: decide → Runtime.Install/Remove → durable
// persist → publish. If the runtime refuses, nothing changed; if persisting
// fails, the runtime is rolled back and the caller gets 500 persist_failed,
// so an acknowledged change is always on disk and a failed one is nowhere.
type Store struct {
	opts     StoreOptions
	rt       Runtime
	log      logrus.FieldLogger
	mu       sync.Mutex
	snap     atomic.Pointer[snapshot]
	ready    atomic.Bool
	replayed bool   // guarded by mu
	lastGen  uint64 // last generation handed out; guarded by mu
	// wireCache maps each persisted rule version to its JSON; guarded by mu.
	wireCache map[*spec.Rule][]byte
}

// OpenStore creates a store. It does not replay persisted rules: call Replay.
func OpenStore(opts StoreOptions) (*Store, error) {
	def := DefaultStoreOptions()
	if opts.Runtime == nil {
		opts.Runtime = def.Runtime
	}
	if opts.Log == nil {
		opts.Log = def.Log
	}
	if opts.Now == nil {
		opts.Now = def.Now
	}
	if opts.ReplayInstallAttempts <= 0 {
		opts.ReplayInstallAttempts = def.ReplayInstallAttempts
	}
	if opts.ReplayRetryDelay <= 0 {
		opts.ReplayRetryDelay = def.ReplayRetryDelay
	}
	if opts.StateDir != "" {
		if err := ensureStateDir(opts.StateDir); err != nil {
			return nil, fmt.Errorf("rules: open store: %w", err)
		}
	}
	s := &Store{opts: opts, rt: opts.Runtime, log: opts.Log.WithField("component", "rules-store")}
	if opts.StateDir != "" {
		removeStaleTemps(opts.StateDir, s.log)
	}
	s.snap.Store(&snapshot{})
	return s, nil
}

// Ready reports whether boot replay has finished.
func (s *Store) Ready() bool { return s.ready.Load() }

// Generation is the generation of the last committed change (replay
// included); it only increases.
func (s *Store) Generation() uint64 { return s.snap.Load().gen }

// Apply is LoxiLB's upsert: create a new key, update a changed one, and fail
// an identical re-POST with 409 rule_exists (Outcome Unchanged, with the
// stored compiled rule). On other errors the Outcome is meaningless.
func (s *Store) Apply(r Rule) (Outcome, *spec.Rule, error) {
	if !s.Ready() {
		return Created, nil, errNotReady()
	}
	// Validation and compilation are pure, so they run before taking the
	// lock; everything that reads or changes shared state runs under it.
	if err := Validate(r); err != nil {
		return Created, nil, err
	}
	nr := normalize(r)
	next := compileValid(&nr)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(nr, next)
}

func (s *Store) applyLocked(nr Rule, next *spec.Rule) (Outcome, *spec.Rule, error) {
	cur := s.snap.Load()
	idx, found := findKey(cur.entries, next.Key)
	var prev *Entry
	if found {
		prev = &cur.entries[idx]
		if err := checkUpdate(prev.Rule, nr); err != nil {
			return Unchanged, prev.Compiled, err
		}
	}
	// Every attempt that reaches the runtime gets a fresh generation, so a
	// rolled-back version is never confused with a later one.
	s.lastGen++
	gen := s.lastGen
	next.Generation = gen
	var prevCompiled *spec.Rule
	if prev != nil {
		prevCompiled = prev.Compiled
	}
	if err := s.rt.Install(prevCompiled, next); err != nil {
		return Created, nil, installError(err, next.Key)
	}
	entries := slices.Clone(cur.entries)
	outcome := Created
	if found {
		entries[idx] = Entry{Rule: nr, Compiled: next}
		outcome = Updated
	} else {
		entries = slices.Insert(entries, idx, Entry{Rule: nr, Compiled: next})
	}
	if err := s.persist(entries); err != nil {
		// Roll the runtime back to what is on disk.
		if prevCompiled != nil {
			if rerr := s.rt.Install(next, prevCompiled); rerr != nil {
				s.log.WithFields(logrus.Fields{"rule": next.Key.String(), "error": rerr}).
					Error("rollback of runtime after failed persist also failed")
			}
		} else {
			s.rt.Remove(next)
		}
		return Created, nil, persistError(err)
	}
	s.snap.Store(&snapshot{gen: gen, entries: entries})
	s.log.WithFields(logrus.Fields{"rule": next.Key.String(), "name": next.Name,
		"outcome": outcome.String(), "generation": gen, "endpoints": len(next.Endpoints)}).Info("rule applied")
	return outcome, next, nil
}

// checkUpdate applies LoxiLB's existing-key rows 29–33 in LoxiLB's order.
func checkUpdate(old, nr Rule) error {
	o, n := &old.ServiceArguments, &nr.ServiceArguments
	switch {
	case !slices.Equal(old.SecondaryIPs, nr.SecondaryIPs):
		return apierror.Conflict(apierror.CodeImmutableField, fieldSecondaryIPs, resultSecIPChange,
			"secondaryIPs cannot change on an existing rule")
	case engineOf(o) != engineOf(n):
		return apierror.Conflict(apierror.CodeImmutableField, saPath(fieldKVEngineType), resultEngineChange,
			fmt.Sprintf("kvEngineType cannot change from %q to %q; delete and recreate the rule", engineOf(o), engineOf(n)))
	case reflect.DeepEqual(effective(old), effective(nr)):
		return apierror.Conflict(apierror.CodeRuleExists, "", resultRuleExists,
			"an identical rule already exists for this key")
	case o.Security != n.Security:
		return apierror.Conflict(apierror.CodeImmutableField, saPath(fieldSecurity), resultSecurityChange, "security cannot change on an existing rule")
	case o.Egress != n.Egress:
		return apierror.Conflict(apierror.CodeImmutableField, saPath(fieldEgress), resultEgressChange, "egress cannot change on an existing rule")
	case (o.Mode == modeFullProxy) != (n.Mode == modeFullProxy):
		return apierror.Conflict(apierror.CodeImmutableField, saPath(fieldMode), resultModeChange, "a fullproxy rule cannot change mode")
	}
	return nil
}

// installError passes a runtime *apierror.Error through unchanged (e.g. 409
// bind_failed) and wraps anything else as a 500 that names the rule.
func installError(err error, k spec.Key) error {
	if _, ok := apierror.As(err); ok {
		return err
	}
	return &apierror.Error{Status: http.StatusInternalServerError, Code: apierror.CodeInternal,
		Message: fmt.Sprintf("the datapath could not serve rule %s", k), Err: err}
}

func persistError(err error) error {
	return &apierror.Error{Status: http.StatusInternalServerError, Code: apierror.CodePersistFailed,
		Message: "the rule set could not be saved durably; the change was rolled back", Err: err}
}

// List returns every rule in a stable order (VIP, port, protocol, rest of key).
// Each Rule is a copy the caller may modify (e.g. fill output-only state for
// GET); Compiled is shared and immutable.
func (s *Store) List() []Entry {
	entries := s.snap.Load().entries
	out := make([]Entry, len(entries))
	for i, e := range entries {
		out[i] = Entry{Rule: cloneRule(e.Rule), Compiled: e.Compiled}
	}
	return out
}

// cloneRule deep-copies the parts of a rule a caller could mutate in place.
func cloneRule(r Rule) Rule {
	r.Endpoints = slices.Clone(r.Endpoints)
	r.SecondaryIPs = slices.Clone(r.SecondaryIPs)
	r.AllowedSources = slices.Clone(r.AllowedSources)
	sa := &r.ServiceArguments
	sa.CHWBLPrefixHashLevel = clonePtr(sa.CHWBLPrefixHashLevel)
	sa.CHWBLPrefixHashFlags = clonePtr(sa.CHWBLPrefixHashFlags)
	sa.CHWBLEnableCacheSalt = clonePtr(sa.CHWBLEnableCacheSalt)
	redactTLS(sa) // issue 11: copies the TLS objects and hides inline keys
	if r.Status != nil {
		st := *r.Status
		r.Status = &st
	}
	return r
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Get returns the first rule on vip:port/proto (LoxiLB's lookup by key).
func (s *Store) Get(vip string, port int, proto string) (Entry, error) {
	a, ok := ParseIPLiteral(vip)
	if !ok {
		return Entry{}, invalidField(fieldExternalIP, "malformed-service error",
			fmt.Sprintf("%q is not an IP address", vip))
	}
	for _, e := range s.snap.Load().entries {
		k := e.Compiled.Key
		if k.VIP == a && int(k.Port) == port && strings.EqualFold(k.Protocol, proto) {
			return Entry{Rule: cloneRule(e.Rule), Compiled: e.Compiled}, nil
		}
	}
	return Entry{}, notFound(fmt.Sprintf("no rule on %s/%s", netip.AddrPortFrom(a, uint16(port)), proto))
}

func notFound(msg string) error {
	return apierror.NotFound(apierror.CodeRuleNotFound, resultNoRule, msg)
}

// Delete removes the rule with exactly this key (404 rule_not_found if none).
func (s *Store) Delete(k spec.Key) error {
	k = NormalizeKey(k)
	_, err := s.deleteWhere(func(e *Entry) bool { return e.Compiled.Key == k }, true)
	if err != nil {
		return err
	}
	return nil
}

// DeleteByName removes every rule named name and returns how many.
func (s *Store) DeleteByName(name string) (int, error) {
	return s.deleteWhere(func(e *Entry) bool { return e.Rule.ServiceArguments.Name == name }, false)
}

// DeleteAll removes every rule and returns how many.
func (s *Store) DeleteAll() (int, error) {
	return s.deleteWhere(func(*Entry) bool { return true }, false)
}

// deleteWhere removes every matching rule as one change: Remove each from the
// runtime, persist once, publish; on a persist failure the removed rules are
// re-installed.
func (s *Store) deleteWhere(match func(*Entry) bool, mustMatch bool) (int, error) {
	if !s.Ready() {
		return 0, errNotReady()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.snap.Load()
	var keep, gone []Entry
	for i := range cur.entries {
		if match(&cur.entries[i]) {
			gone = append(gone, cur.entries[i])
		} else {
			keep = append(keep, cur.entries[i])
		}
	}
	if len(gone) == 0 {
		if mustMatch {
			return 0, notFound("no rule with this key")
		}
		return 0, nil
	}
	for _, e := range gone {
		s.rt.Remove(e.Compiled)
	}
	if err := s.persist(keep); err != nil {
		for _, e := range gone {
			if rerr := s.rt.Install(nil, e.Compiled); rerr != nil {
				s.log.WithFields(logrus.Fields{"rule": e.Compiled.Key.String(), "error": rerr}).
					Error("re-install after failed persist failed; rule is stored but not served")
			}
		}
		return 0, persistError(err)
	}
	s.lastGen++
	s.snap.Store(&snapshot{gen: s.lastGen, entries: keep})
	for _, e := range gone {
		s.log.WithFields(logrus.Fields{"rule": e.Compiled.Key.String(), "name": e.Compiled.Name,
			"generation": s.lastGen}).Info("rule deleted")
	}
	return len(gone), nil
}

// Replay loads the persisted rule set through full validation. Until it
// returns, Ready reports false and mutating calls fail with CodeNotReady.
// A corrupt file is quarantined and boot continues empty; a rule that no
// longer validates (or that the runtime refuses) is logged, skipped and kept
// in a rules.json.rejected-<ts> file.
func (s *Store) Replay(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replayed {
		return errors.New("rules: Replay called twice")
	}
	if s.opts.StateDir == "" {
		s.replayed = true
		s.ready.Store(true)
		return nil
	}
	raws, err := s.loadState()
	if err != nil {
		return err
	}
	var entries []Entry
	var rejected []rejectedRule
	gen := uint64(0)
	for i, raw := range raws {
		if err := ctx.Err(); err != nil {
			// Undo what was installed so a cancelled boot leaves nothing served.
			for _, e := range entries {
				s.rt.Remove(e.Compiled)
			}
			return fmt.Errorf("rules: replay cancelled after %d of %d rules: %w", i, len(raws), err)
		}
		e, rerr := s.replayOne(ctx, raw, entries, gen+1)
		if rerr != nil {
			s.log.WithFields(logrus.Fields{"index": i, "error": rerr.Error()}).
				Error("persisted rule rejected at replay; skipped and kept in the rejected file")
			rejected = append(rejected, rejectedRule{Rule: raw, Error: rerr.Error()})
			continue
		}
		gen++
		idx, _ := findKey(entries, e.Compiled.Key)
		entries = slices.Insert(entries, idx, e)
	}
	if len(rejected) > 0 {
		if err := s.writeRejected(rejected); err != nil {
			return fmt.Errorf("rules: replay: %w", err)
		}
		if err := s.persist(entries); err != nil {
			return fmt.Errorf("rules: replay: rewrite rule set: %w", err)
		}
	}
	s.lastGen = gen
	s.snap.Store(&snapshot{gen: gen, entries: entries})
	s.replayed = true
	s.ready.Store(true)
	s.log.WithFields(logrus.Fields{"rules": len(entries), "rejected": len(rejected)}).Info("rule replay finished")
	return nil
}

// replayOne runs one persisted rule through decode → validate → compile →
// Install, exactly like a POST.
func (s *Store) replayOne(ctx context.Context, raw []byte, entries []Entry, gen uint64) (Entry, error) {
	r, err := DecodeJSON(raw)
	if err != nil {
		return Entry{}, err
	}
	if err := Validate(r); err != nil {
		return Entry{}, err
	}
	nr := normalize(r)
	c := compileValid(&nr)
	if _, dup := findKey(entries, c.Key); dup {
		return Entry{}, apierror.Conflict(apierror.CodeRuleExists, "", resultRuleExists,
			"duplicate key "+c.Key.String()+" in the persisted rule set")
	}
	c.Generation = gen
	for attempt := 1; ; attempt++ {
		err := s.rt.Install(nil, c)
		if err == nil {
			return Entry{Rule: nr, Compiled: c}, nil
		}
		if attempt >= s.opts.ReplayInstallAttempts {
			return Entry{}, installError(err, c.Key)
		}
		s.log.WithFields(logrus.Fields{"rule": c.Key.String(), "attempt": attempt, "error": err}).
			Warn("datapath refused a persisted rule at replay; retrying")
		select {
		case <-ctx.Done():
			return Entry{}, installError(err, c.Key)
		case <-time.After(s.opts.ReplayRetryDelay):
		}
	}
}

// findKey binary-searches the sorted entries for k.
func findKey(entries []Entry, k spec.Key) (int, bool) {
	return slices.BinarySearchFunc(entries, k, func(e Entry, k spec.Key) int {
		return compareKeys(e.Compiled.Key, k)
	})
}

// compareKeys orders rules by VIP, port, protocol, then the rest of the key.
func compareKeys(a, b spec.Key) int {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c
	}
	return cmp.Or(
		cmp.Compare(a.Port, b.Port),
		cmp.Compare(a.Protocol, b.Protocol),
		cmp.Compare(a.Block, b.Block),
		cmp.Compare(a.Host, b.Host),
		cmp.Compare(a.PathPrefix, b.PathPrefix),
		cmp.Compare(a.PathMatchMode, b.PathMatchMode),
		cmp.Compare(a.ModelName, b.ModelName),
	)
}
