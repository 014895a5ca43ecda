package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
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

// BatchRemover is a Runtime that removes many rules at once for less than
// removing them one by one (the datapath drops their metric series in one
// pass). DeleteAll and DeleteByName use it.
type BatchRemover interface {
	RemoveMany(rs []*spec.Rule)
}

// RemoveAll removes rs from rt, in one batch when rt is a BatchRemover.
func RemoveAll(rt Runtime, rs []*spec.Rule) {
	if b, ok := rt.(BatchRemover); ok && len(rs) > 1 {
		b.RemoveMany(rs)
		return
	}
	for _, r := range rs {
		rt.Remove(r)
	}
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
	Rule     rules.Rule
	Compiled *spec.Rule
	// Revision is the backend revision of this version (its compare-and-
	// swap token for the next write of the key).
	Revision int64
	// InstallError, when set, says why the datapath does not serve this
	// stored rule yet (a certificate missing at boot, a VIP address not up):
	// the rule is kept and installation retried with backoff (pending.go).
	InstallError string
}

// Options configures a Store.
type Options struct {
	StateDir string  // where rules.json is persisted; "" = memory only
	Runtime  Runtime // nil = no-op
	Log      logrus.FieldLogger
	// Now is the clock used for quarantine file names (tests pin it).
	Now func() time.Time
	// ReplayInstallAttempts bounds how often replay retries Runtime.Install
	// for one rule (0 = default 5). A restart can race the old process for a
	// port; without retries that rule would be dropped from the set.
	ReplayInstallAttempts int
	// ReplayRetryDelay is the pause between those attempts (0 = 200 ms),
	// and the first pause before a kept rule that the datapath refused is
	// tried again (doubling up to MaxInstallRetryDelay).
	ReplayRetryDelay time.Duration
	// MaxInstallRetryDelay caps the backoff of those later tries (0 = 30 s).
	MaxInstallRetryDelay time.Duration

	// Journal configures the FileBackend's write journal. DefaultOptions
	// (and the daemon) turn it on; the zero value is off, every write
	// rewriting rules.json. Unused with another Backend.
	Journal JournalOptions
	// Backend keeps the rules; nil = a FileBackend in StateDir. A backend
	// that is also a Watcher (etcd) is followed after Replay.
	Backend Backend
	// CommitTimeout bounds one Backend.Commit (0 = 5 s); past it the write
	// fails with 503 store_unavailable and the runtime is rolled back.
	CommitTimeout time.Duration
	// OnRejectedValue, if set, counts a stored value refused at replay or
	// from the watch (reason: malformed, invalid, key_mismatch,
	// immutable_field, install_failed, duplicate).
	OnRejectedValue func(reason string)
}

// DefaultOptions returns options for a memory-only store with no
// datapath; the daemon sets StateDir and Runtime.
func DefaultOptions() Options {
	return Options{Runtime: NopRuntime{}, Log: logrus.StandardLogger(), Now: time.Now, Journal: DefaultJournalOptions(),
		ReplayInstallAttempts: 5, ReplayRetryDelay: 200 * time.Millisecond, MaxInstallRetryDelay: 30 * time.Second}
}

// Result texts LoxiLB returns for store-level conflicts (reference §3.1).
const (
	resultNoRule = "no-rule error"
)

// snapshot is an immutable view of the rule set, published after each commit
// so reads never wait for a mutation (which may be fsyncing).
type snapshot struct {
	gen     uint64
	entries []*Entry // sorted by key; each *Entry immutable once published
}

// Store holds the rule set, applies changes atomically and persists them.
//
// Every mutation runs under mu: decide → Runtime.Install/Remove → durable
// persist → publish. If the runtime refuses, nothing changed; if persisting
// fails, the runtime is rolled back and the caller gets 500 persist_failed,
// so an acknowledged change is always on disk and a failed one is nowhere.
type Store struct {
	opts     Options
	rt       Runtime
	log      logrus.FieldLogger
	mu       sync.Mutex
	snap     atomic.Pointer[snapshot]
	ready    atomic.Bool
	replayed bool   // guarded by mu
	lastGen  uint64 // last generation handed out; guarded by mu

	backend Backend
	applied atomic.Int64 // backend revision the served set reflects
	ctx     context.Context
	cancel  context.CancelFunc
	follow  sync.WaitGroup // the watch follower, if any, and the installer
	// retry wakes the installer of pending rules (capacity 1).
	retry chan struct{}
}

// Open creates a store. It does not replay persisted rules: call Replay.
func Open(opts Options) (*Store, error) {
	def := DefaultOptions()
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
	if opts.MaxInstallRetryDelay <= 0 {
		opts.MaxInstallRetryDelay = def.MaxInstallRetryDelay
	}
	if opts.StateDir != "" {
		if err := ensureStateDir(opts.StateDir); err != nil {
			return nil, fmt.Errorf("rules: open store: %w", err)
		}
	}
	if opts.CommitTimeout <= 0 {
		opts.CommitTimeout = 5 * time.Second
	}
	log := opts.Log.WithField("component", "rules-store")
	if opts.Backend == nil {
		fb, err := OpenFileBackendJournal(opts.StateDir, log, opts.Now, opts.Journal)
		if err != nil {
			return nil, fmt.Errorf("rules: open store: %w", err)
		}
		opts.Backend = fb
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{opts: opts, rt: opts.Runtime, log: log, backend: opts.Backend, ctx: ctx, cancel: cancel,
		retry: make(chan struct{}, 1)}
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
func (s *Store) Apply(r rules.Rule) (Outcome, *spec.Rule, error) {
	if !s.Ready() {
		return Created, nil, errNotReady()
	}
	// Validation and compilation are pure, so they run before taking the
	// lock; everything that reads or changes shared state runs under it.
	nr, next, err := rules.Prepare(r)
	if err != nil {
		return Created, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(nr, next)
}

func (s *Store) applyLocked(nr rules.Rule, next *spec.Rule) (Outcome, *spec.Rule, error) {
	cur := s.snap.Load()
	idx, found := findKey(cur.entries, next.Key)
	var prev *Entry
	if found {
		prev = cur.entries[idx]
		if err := rules.CheckUpdate(prev.Rule, nr); err != nil {
			return Unchanged, prev.Compiled, err
		}
	}
	if err := checkVIPCollisions(cur.entries, next); err != nil {
		return Created, nil, err
	}
	// Every attempt that reaches the runtime gets a fresh generation, so a
	// rolled-back version is never confused with a later one.
	s.lastGen++
	gen := s.lastGen
	next.Generation = gen
	prevCompiled := served(prev)
	if err := s.rt.Install(prevCompiled, next); err != nil {
		return Created, nil, installError(err, next.Key)
	}
	rev, err := s.commitPut(next.Key, nr, prev)
	if err != nil {
		// Roll the runtime back to what is on disk.
		if prevCompiled != nil {
			if rerr := s.rt.Install(next, prevCompiled); rerr != nil {
				s.log.WithFields(logrus.Fields{"rule": next.Key.String(), "error": rerr}).
					Error("rollback of runtime after failed persist also failed")
			}
		} else {
			s.rt.Remove(next)
		}
		return Created, nil, commitError(err)
	}
	// Entries are shared between snapshots by pointer: a write copies one
	// pointer per rule, not the rules (880 bytes each), and allocates once.
	e := &Entry{Rule: nr, Compiled: next, Revision: rev}
	var entries []*Entry
	outcome := Created
	if found {
		entries = slices.Clone(cur.entries)
		entries[idx] = e
		outcome = Updated
	} else {
		entries = make([]*Entry, 0, len(cur.entries)+1)
		entries = append(append(append(entries, cur.entries[:idx]...), e), cur.entries[idx:]...)
	}
	s.noteCommitted(rev)
	s.snap.Store(&snapshot{gen: gen, entries: entries})
	s.log.WithFields(logrus.Fields{"rule": next.Key.String(), "name": next.Name,
		"outcome": outcome.String(), "generation": gen, "endpoints": len(next.Endpoints)}).Info("rule applied")
	return outcome, next, nil
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
		out[i] = e.view()
	}
	return out
}

// view is the copy of e that List and Get hand out: the rule redacted and
// the caller's to modify, no revision.
func (e *Entry) view() Entry {
	return Entry{Rule: rules.Redacted(e.Rule), Compiled: e.Compiled, InstallError: e.InstallError}
}

// Get returns the first rule on vip:port/proto (LoxiLB's lookup by key).
func (s *Store) Get(vip string, port int, proto string) (Entry, error) {
	a, err := rules.ParseVIP(vip)
	if err != nil {
		return Entry{}, err
	}
	for _, e := range s.snap.Load().entries {
		k := e.Compiled.Key
		if k.VIP == a && int(k.Port) == port && strings.EqualFold(k.Protocol, proto) {
			return e.view(), nil
		}
	}
	return Entry{}, notFound(fmt.Sprintf("no rule on %s/%s", netip.AddrPortFrom(a, uint16(port)), proto))
}

func notFound(msg string) error {
	return apierror.NotFound(apierror.CodeRuleNotFound, resultNoRule, msg)
}

// Delete removes the rule with exactly this key (404 rule_not_found if none).
func (s *Store) Delete(k spec.Key) error {
	k = rules.NormalizeKey(k)
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
	var gone []*Entry
	keep := make([]*Entry, 0, len(cur.entries))
	for _, e := range cur.entries {
		if match(e) {
			gone = append(gone, e)
		} else {
			keep = append(keep, e)
		}
	}
	if len(gone) == 0 {
		if mustMatch {
			return 0, notFound("no rule with this key")
		}
		return 0, nil
	}
	compiled := make([]*spec.Rule, len(gone))
	for i, e := range gone {
		compiled[i] = e.Compiled
	}
	RemoveAll(s.rt, compiled)
	ch := Change{Deletes: make([]Delete, len(gone))}
	for i, e := range gone {
		ch.Deletes[i] = Delete{Key: BackendKey(e.Compiled.Key), Expect: e.Revision}
	}
	rev, err := s.commit(ch)
	if err != nil {
		for _, e := range gone {
			if e.InstallError != "" {
				continue // it was not served
			}
			if rerr := s.rt.Install(nil, e.Compiled); rerr != nil {
				s.log.WithFields(logrus.Fields{"rule": e.Compiled.Key.String(), "error": rerr}).
					Error("re-install after failed persist failed; rule is stored but not served")
			}
		}
		return 0, commitError(err)
	}
	s.noteCommitted(rev)
	s.lastGen++
	s.snap.Store(&snapshot{gen: s.lastGen, entries: keep})
	for _, e := range gone {
		s.log.WithFields(logrus.Fields{"rule": e.Compiled.Key.String(), "name": e.Compiled.Name,
			"generation": s.lastGen}).Info("rule deleted")
	}
	return len(gone), nil
}

// Replay loads the stored rule set through full validation. Until it
// returns, Ready reports false and mutating calls fail with CodeNotReady.
// A corrupt file is quarantined and boot continues empty; a rule that no
// longer validates (or that the runtime refuses) is logged, skipped and, in
// the file backend, kept in a rules.json.rejected-<ts> file. A shared
// backend that cannot be reached is retried until ctx ends: a replica serves
// nothing until it has synced once, so no stale copy can resurrect a rule
// deleted meanwhile. After replay a Watcher backend is followed.
func (s *Store) Replay(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replayed {
		return errors.New("rules: Replay called twice")
	}
	loaded, err := s.loadRetrying(ctx)
	if err != nil {
		return err
	}
	var entries []*Entry
	var rejected []rejectedRule
	gen := uint64(0)
	for i, v := range loaded.Values {
		if err := ctx.Err(); err != nil {
			// Undo what was installed so a cancelled boot leaves nothing served.
			for _, e := range entries {
				s.rt.Remove(e.Compiled)
			}
			return fmt.Errorf("rules: replay cancelled after %d of %d rules: %w", i, len(loaded.Values), err)
		}
		e, rerr := s.replayOne(ctx, v, entries, gen+1)
		if rerr != nil && e.Compiled != nil {
			// Valid but not servable now: kept, reported, retried.
			s.log.WithFields(logrus.Fields{"index": i, "key": v.Key, "error": rerr.Error()}).
				Error("stored rule not served at replay; kept and retried in the background")
			e.InstallError = rerr.Error()
			rerr = nil
		}
		if rerr != nil {
			s.log.WithFields(logrus.Fields{"index": i, "key": v.Key, "error": rerr.Error()}).
				Error("stored rule rejected at replay; skipped")
			rejected = append(rejected, rejectedRule{Rule: v.Value, Error: rerr.Error()})
			continue
		}
		gen++
		idx, _ := findKey(entries, e.Compiled.Key)
		entries = slices.Insert(entries, idx, &e)
	}
	if fb, ok := s.backend.(*FileBackend); ok && len(rejected) > 0 {
		accepted := make([]string, len(entries))
		for i, e := range entries {
			accepted[i] = BackendKey(e.Compiled.Key)
		}
		if err := fb.keepRejected(rejected, accepted); err != nil {
			return fmt.Errorf("rules: replay: %w", err)
		}
	}
	s.lastGen = gen
	s.applied.Store(loaded.Revision)
	s.snap.Store(&snapshot{gen: gen, entries: entries})
	s.replayed = true
	s.ready.Store(true)
	s.log.WithFields(logrus.Fields{"rules": len(entries), "rejected": len(rejected),
		"revision": loaded.Revision}).Info("rule replay finished")
	s.follow.Add(1)
	go s.installPending()
	if w, ok := s.backend.(Watcher); ok {
		s.follow.Add(1)
		go s.followWatch(w, loaded.Revision)
	}
	return nil
}

// loadRetrying loads the backend; a shared backend that is unavailable is
// retried (the replica stays not-ready) until ctx ends.
func (s *Store) loadRetrying(ctx context.Context) (Loaded, error) {
	delay := s.opts.ReplayRetryDelay
	for attempt := 1; ; attempt++ {
		loaded, err := s.backend.Load(ctx)
		if err == nil {
			return loaded, nil
		}
		e, ok := apierror.As(err)
		if !ok || e.Code != apierror.CodeStoreUnavailable {
			return Loaded{}, fmt.Errorf("rules: load stored rules: %w", err)
		}
		if attempt == 1 || attempt%25 == 0 {
			s.log.WithFields(logrus.Fields{"attempt": attempt, "error": err}).
				Warn("rule store unreachable at boot; serving nothing until it has synced once")
		}
		select {
		case <-ctx.Done():
			return Loaded{}, fmt.Errorf("rules: load stored rules: %w", ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 2*time.Second)
	}
}

// replayOne runs one stored value through decode → validate → compile →
// Install, exactly like a POST.
func (s *Store) replayOne(ctx context.Context, v StoredValue, entries []*Entry, gen uint64) (Entry, error) {
	nr, c, err := s.decodeValue(v)
	if err != nil {
		return Entry{}, err
	}
	if _, dup := findKey(entries, c.Key); dup {
		s.rejectedValue("duplicate")
		return Entry{}, apierror.Conflict(apierror.CodeRuleExists, "", rules.ResultRuleExists,
			"duplicate key "+c.Key.String()+" in the persisted rule set")
	}
	c.Generation = gen
	for attempt := 1; ; attempt++ {
		err := s.rt.Install(nil, c)
		if err == nil {
			return Entry{Rule: nr, Compiled: c, Revision: v.Revision}, nil
		}
		if attempt >= s.opts.ReplayInstallAttempts || ctx.Err() != nil {
			s.rejectedValue("install_failed")
			// The entry comes back with the error: the caller keeps it.
			return Entry{Rule: nr, Compiled: c, Revision: v.Revision}, installError(err, c.Key)
		}
		s.log.WithFields(logrus.Fields{"rule": c.Key.String(), "attempt": attempt, "error": err}).
			Warn("datapath refused a persisted rule at replay; retrying")
		select {
		case <-ctx.Done():
		case <-time.After(s.opts.ReplayRetryDelay):
		}
	}
}

// decodeValue is the validate → compile half of the one path every stored
// value takes (replay and watch alike). A value whose key is not its rule's
// BackendKey is refused: a direct write under the wrong key must not shadow
// or duplicate another rule.
func (s *Store) decodeValue(v StoredValue) (rules.Rule, *spec.Rule, error) {
	r, err := rules.DecodeJSON(v.Value)
	if err != nil {
		s.rejectedValue("malformed")
		return rules.Rule{}, nil, err
	}
	nr, c, err := rules.Prepare(r)
	if err != nil {
		s.rejectedValue("invalid")
		return rules.Rule{}, nil, err
	}
	if want := BackendKey(c.Key); v.Key != want {
		s.rejectedValue("key_mismatch")
		return rules.Rule{}, nil, apierror.BadRequest(apierror.CodeInvalidField, "", "malformed-service error",
			fmt.Sprintf("stored under key %q but the rule's key is %q", v.Key, want))
	}
	return nr, c, nil
}

func (s *Store) rejectedValue(reason string) {
	if s.opts.OnRejectedValue != nil {
		s.opts.OnRejectedValue(reason)
	}
}

// findKey binary-searches the sorted entries for k.
func findKey(entries []*Entry, k spec.Key) (int, bool) {
	return slices.BinarySearchFunc(entries, k, func(e *Entry, k spec.Key) int {
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

// notReadyResult is LoxiLB's boot-gate text.
const notReadyResult = "configuration writes are rejected until the boot config replay settles"

func errNotReady() *apierror.Error {
	return apierror.New(503, apierror.CodeNotReady, "", notReadyResult,
		"the daemon is still replaying its persisted rules; retry shortly")
}
