package tenant

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/atomicfile"
	"github.com/sirupsen/logrus"
)

// Options configures a Registry.
type Options struct {
	// StateDir holds apikeys.json (0600). Empty: memory only (tests).
	StateDir string `yaml:"-"`
	// MaxKeysPerTenant bounds one tenant's keys.
	MaxKeysPerTenant int `yaml:"tenant-max-keys"`
	// DefaultMaxTokens is the completion estimate reserved for a request
	// that sets no max_tokens.
	DefaultMaxTokens int `yaml:"tenant-default-max-tokens"`
	// AuthFailuresPerSec and AuthFailureBurst rate-limit failed key checks
	// per client IP, so guessing keys costs the guesser, not the gateway.
	AuthFailuresPerSec int                `yaml:"-"`
	AuthFailureBurst   int                `yaml:"-"`
	Log                logrus.FieldLogger `yaml:"-"`
	Now                func() time.Time   `yaml:"-"` // nil: time.Now
	// Shared, when set, keeps the registry in a store every replica reads
	// (the etcd rule store) instead of apikeys.json: keys made through one
	// replica work on all. Buckets and usage stay per replica.
	Shared Persister `yaml:"-"`
	// OnSharedHealth, when set, is told whether the shared document is
	// readable each time that changes (err nil: readable again), so the
	// daemon can count it and report it.
	OnSharedHealth func(err error) `yaml:"-"`
}

// Persister is a shared home of the registry's document, written with
// compare-and-swap on a revision and watched (etcdstore.Blob).
type Persister interface {
	Load(ctx context.Context) (data []byte, rev int64, err error)
	Save(ctx context.Context, data []byte, rev int64) (newRev int64, err error)
	Watch(fn func(data []byte, rev int64))
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{
		MaxKeysPerTenant:   1000,
		DefaultMaxTokens:   256,
		AuthFailuresPerSec: 10,
		AuthFailureBurst:   20,
	}
}

// fileName is the registry's file in the state directory.
const fileName = "apikeys.json"

// entry is one key in a snapshot: the immutable record plus its buckets and
// usage counters, which outlive PATCHes.
type entry struct {
	rec   *record
	lim   *limits
	usage *Usage
}

// tenantEntry is one tenant's ceilings and usage.
type tenantEntry struct {
	limit TenantLimit
	lim   *limits
}

type snapshot struct {
	keys    map[string]*entry // by key id
	tenants map[string]*tenantEntry
}

// Registry holds every key and tenant limit. Reads are lock-free; writes
// are serialised, persisted, then published.
type Registry struct {
	opts     Options
	now      func() time.Time
	log      logrus.FieldLogger
	mu       sync.Mutex // writers
	share    int        // replicas sharing each limit (SetShare); under mu
	rev      int64      // revision of the shared document this snapshot is; under mu
	snap     atomic.Pointer[snapshot]
	authFail *ipLimiter
	// unreadable is why the shared document could not be read at boot or in
	// its last version (nil: fine); under mu.
	unreadable error
}

// Open loads the registry from opts.StateDir (an absent file is empty).
func Open(opts Options) (*Registry, error) {
	d := DefaultOptions()
	if opts.MaxKeysPerTenant <= 0 {
		opts.MaxKeysPerTenant = d.MaxKeysPerTenant
	}
	if opts.DefaultMaxTokens <= 0 {
		opts.DefaultMaxTokens = d.DefaultMaxTokens
	}
	if opts.AuthFailuresPerSec <= 0 {
		opts.AuthFailuresPerSec = d.AuthFailuresPerSec
	}
	if opts.AuthFailureBurst <= 0 {
		opts.AuthFailureBurst = d.AuthFailureBurst
	}
	if opts.Log == nil {
		opts.Log = logrus.StandardLogger()
	}
	r := &Registry{opts: opts, now: opts.Now, log: opts.Log, share: 1}
	if r.now == nil {
		r.now = time.Now
	}
	r.authFail = newIPLimiter(float64(opts.AuthFailuresPerSec), float64(opts.AuthFailureBurst))
	if opts.StateDir != "" {
		// Nothing writes apikeys.json (or its last-good copy) yet: what a
		// crash left mid-write goes.
		for _, p := range []string{r.path(), r.lastGoodPath()} {
			if n, err := atomicfile.RemoveTemps(p); err != nil {
				r.log.WithError(err).Warn("tenant: could not remove leftover temporary key files")
			} else if n > 0 {
				r.log.WithField("files", n).Info("tenant: removed temporary key files a crash left behind")
			}
		}
	}
	s, err := r.load()
	if err != nil {
		return nil, err
	}
	r.snap.Store(s)
	if opts.Shared != nil {
		opts.Shared.Watch(r.sharedChanged)
	}
	return r, nil
}

// sharedChanged installs a version of the shared document written by any
// replica (this one's own writes come back too, and are skipped). Entries
// that stay keep their buckets and usage.
func (r *Registry) sharedChanged(data []byte, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev <= r.rev {
		return
	}
	next, err := r.parse(data, r.snap.Load())
	if err != nil {
		r.log.WithError(err).Error("tenant: ignoring an unreadable shared key store version; keeping the keys in force")
		r.setUnreadable(err)
		return
	}
	r.rev = rev
	r.snap.Store(next)
	r.saveLastGood(data)
	if r.unreadable != nil {
		r.log.WithField("revision", rev).Info("tenant: shared key store readable again")
	}
	r.setUnreadable(nil)
}

// setUnreadable records (under mu, or before Open returns) whether the
// shared document is readable and tells OnSharedHealth on a change.
func (r *Registry) setUnreadable(err error) {
	was := r.unreadable
	r.unreadable = err
	if (was == nil) != (err == nil) && r.opts.OnSharedHealth != nil {
		r.opts.OnSharedHealth(err)
	}
}

// SharedProblem is why the shared key document is not in force ("" when
// it is, or when the registry is not shared): the status a replica reports
// while it serves the last readable keys, or none.
func (r *Registry) SharedProblem() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unreadable == nil {
		return ""
	}
	return r.unreadable.Error()
}

// --- persistence ---

// stored is the on-disk form: records with hashes, tenant limits.
type stored struct {
	Keys    []storedKey   `json:"keys"`
	Tenants []TenantLimit `json:"tenants"`
}

type storedKey struct {
	KeyView
	Hash string `json:"key_hash"`
}

func (r *Registry) path() string { return filepath.Join(r.opts.StateDir, fileName) }

func (r *Registry) load() (*snapshot, error) {
	empty := &snapshot{keys: map[string]*entry{}, tenants: map[string]*tenantEntry{}}
	if r.opts.Shared != nil {
		data, rev, err := r.opts.Shared.Load(context.Background())
		if err != nil {
			// Not reachable yet (etcd starting, a partition): serve no keys
			// until the watch, which retries, delivers the document; a
			// write meanwhile fails its compare-and-swap and re-reads.
			r.log.WithError(err).Warn("tenant: shared key store not readable yet; keys arrive when it is")
			return empty, nil
		}
		if rev == 0 && r.opts.StateDir != "" {
			// First replica on a new shared store: carry this replica's
			// apikeys.json over (lost race: another replica did first).
			if local, err := os.ReadFile(r.path()); err == nil && len(local) > 0 {
				if nrev, err := r.opts.Shared.Save(context.Background(), local, 0); err == nil {
					r.log.WithField("file", r.path()).Info("tenant: API keys of the state directory copied to the shared store")
					data, rev = local, nrev
				} else if data, rev, err = r.opts.Shared.Load(context.Background()); err != nil {
					return nil, fmt.Errorf("tenant: read the shared key store: %w", err)
				}
			}
		}
		s, err := r.parse(data, empty)
		if err != nil {
			// A bad document must not keep a replica from booting: serve the
			// last version this replica could read (lastgood.go), else no
			// keys (keyed rules refuse every request: fail closed); leave
			// the revision unset so writes fail their compare-and-swap
			// rather than overwrite what an operator may still repair, and
			// take the next readable version the watch delivers.
			if last, ok := r.loadLastGood(empty); ok {
				r.log.WithError(err).WithFields(logrus.Fields{"revision": rev, "file": r.lastGoodPath()}).Error("tenant: shared key store unreadable; serving the last good keys until it is fixed")
				r.setUnreadable(r.lastGoodError(err))
				return last, nil
			}
			r.log.WithError(err).WithField("revision", rev).Error("tenant: shared key store unreadable; serving no API keys until it is fixed")
			r.setUnreadable(err)
			return empty, nil
		}
		r.rev = rev
		r.saveLastGood(data)
		return s, nil
	}
	if r.opts.StateDir == "" {
		return empty, nil
	}
	data, err := os.ReadFile(r.path())
	if os.IsNotExist(err) {
		return empty, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tenant: read %s: %w", r.path(), err)
	}
	s, err := r.parse(data, empty)
	if err != nil {
		return nil, fmt.Errorf("tenant: %s: %w", r.path(), err)
	}
	return s, nil
}

// parse reads a stored document (nil: empty) into a snapshot, reusing the
// buckets and usage of prev's entries with the same ids.
func (r *Registry) parse(data []byte, prev *snapshot) (*snapshot, error) {
	s := &snapshot{keys: map[string]*entry{}, tenants: map[string]*tenantEntry{}}
	if len(data) == 0 {
		return s, nil
	}
	var st stored
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("parse key store: %w", err)
	}
	now := r.now()
	for _, k := range st.Keys {
		h, err := ParseKeyHash(k.Hash)
		if err != nil || !validID(k.KeyID) {
			r.log.WithField("key_id", k.KeyID).Warn("tenant: skipping a stored API key with a bad id or hash")
			continue
		}
		rec := &record{KeyView: k.KeyView, Hash: h}
		var lim *limits
		usage := &Usage{}
		if old, ok := prev.keys[k.KeyID]; ok {
			lim, usage = old.lim, old.usage
		}
		s.keys[k.KeyID] = &entry{rec: rec, lim: withLimits(lim, rec.RateLimitRPS, rec.BurstSize, rec.TokensPerMin, r.share, now), usage: usage}
	}
	for _, t := range st.Tenants {
		var lim *limits
		if old, ok := prev.tenants[t.TenantID]; ok {
			lim = old.lim
		}
		s.tenants[t.TenantID] = &tenantEntry{limit: t, lim: withLimits(lim, deref(t.RPS), deref(t.RPS), deref(t.TokensPerMin), r.share, now)}
	}
	return s, nil
}

func (r *Registry) persist(s *snapshot) error {
	if r.opts.StateDir == "" && r.opts.Shared == nil {
		return nil
	}
	st := stored{Keys: []storedKey{}, Tenants: []TenantLimit{}}
	for _, e := range s.keys {
		st.Keys = append(st.Keys, storedKey{KeyView: e.rec.KeyView, Hash: e.rec.Hash.String()})
	}
	sort.Slice(st.Keys, func(i, j int) bool { return st.Keys[i].KeyID < st.Keys[j].KeyID })
	for _, t := range s.tenants {
		st.Tenants = append(st.Tenants, t.limit)
	}
	sort.Slice(st.Tenants, func(i, j int) bool { return st.Tenants[i].TenantID < st.Tenants[j].TenantID })
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("tenant: encode: %w", err)
	}
	if r.opts.Shared != nil {
		rev, err := r.opts.Shared.Save(context.Background(), data, r.rev)
		if err != nil {
			return err
		}
		r.rev = rev
		r.saveLastGood(data)
		return nil
	}
	return r.writePrivate(r.path(), data)
}

// writePrivate durably replaces path, a file of the state directory, with
// data, readable by the daemon's user only (the key documents hold salted
// key hashes).
func (r *Registry) writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(r.opts.StateDir, 0o700); err != nil {
		return fmt.Errorf("tenant: create state dir: %w", err)
	}
	return atomicfile.Write(path, data, 0o600)
}

// commit persists next and publishes it; on failure nothing changes.
func (r *Registry) commit(next *snapshot) error {
	if err := r.persist(next); err != nil {
		if r.opts.Shared != nil && r.reloadOnConflict() {
			return apierror.Conflict(apierror.CodeRevisionConflict, "", "changed elsewhere",
				"the key store changed through another replica; nothing changed here: retry")
		}
		if r.opts.Shared != nil {
			e := apierror.New(http.StatusServiceUnavailable, apierror.CodeStoreUnavailable, "", "store unavailable",
				"the shared key store cannot be written; nothing changed: retry later")
			e.Err = err
			return e
		}
		e := apierror.New(http.StatusInternalServerError, apierror.CodePersistFailed, "", "persist failed", "the key store could not be written; nothing changed")
		e.Err = err
		return e
	}
	r.snap.Store(next)
	return nil
}

// reloadOnConflict re-reads the shared document after a failed write (under
// mu) and reports whether it had moved on: a lost race with another replica.
func (r *Registry) reloadOnConflict() bool {
	data, rev, err := r.opts.Shared.Load(context.Background())
	if err != nil || rev == r.rev {
		return false
	}
	next, err := r.parse(data, r.snap.Load())
	if err != nil {
		return false
	}
	r.rev = rev
	r.snap.Store(next)
	r.saveLastGood(data)
	return true
}

// clone copies the maps (entries are shared: they are immutable apart from
// their buckets and counters, which are meant to carry over).
func (s *snapshot) clone() *snapshot {
	n := &snapshot{keys: make(map[string]*entry, len(s.keys)+1), tenants: make(map[string]*tenantEntry, len(s.tenants)+1)}
	for k, v := range s.keys {
		n.keys[k] = v
	}
	for k, v := range s.tenants {
		n.tenants[k] = v
	}
	return n
}

// --- key API ---

// Create validates spec and stores a new key. The raw key is in the answer
// only (never stored); an imported key (KeyID + KeyHash) has none.
func (r *Registry) Create(spec KeySpec) (Created, error) {
	if err := spec.validate(); err != nil {
		return Created{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	if spec.KeyHash != "" {
		// An import of an id that exists is checked first, so re-applying
		// the same GitOps document is "exists", not "duplicate name".
		if e, taken := cur.keys[spec.KeyID]; taken {
			return Created{}, importConflict(e.rec, spec)
		}
	}
	n := 0
	for _, e := range cur.keys {
		if e.rec.TenantID != spec.TenantID {
			continue
		}
		n++
		if e.rec.Name == spec.Name {
			return Created{}, apierror.BadRequest(CodeDuplicateName, FieldName, "duplicate key name", "tenant "+spec.TenantID+" already has a key named "+spec.Name)
		}
	}
	if n >= r.opts.MaxKeysPerTenant || len(cur.keys) >= maxKeysTotal {
		return Created{}, apierror.BadRequest(CodeTooManyKeys, FieldTenantID, "too many keys", fmt.Sprintf("tenant %s already has %d keys (the limit)", spec.TenantID, n))
	}
	var id, raw string
	var h KeyHash
	if spec.KeyHash != "" {
		id = spec.KeyID
		h, _ = ParseKeyHash(spec.KeyHash)
	} else {
		m, err := Mint()
		if err != nil {
			return Created{}, err
		}
		id, raw, h = m.ID, m.Raw.Reveal(), m.Hash
	}
	now := r.now().UTC()
	rec := &record{Hash: h, KeyView: KeyView{
		KeyID: id, TenantID: spec.TenantID, Name: spec.Name, KeyPrefix: KeyPrefix + id + "_",
		AllowedModels: slices.Clone(spec.AllowedModels),
		RateLimitRPS:  deref(spec.RateLimitRPS), BurstSize: deref(spec.BurstSize), TokensPerMin: deref(spec.TokensPerMin),
		Enabled: spec.Enabled == nil || *spec.Enabled, ExpiresAt: spec.ExpiresAt, MaxPriority: spec.MaxPriority, CreatedAt: now,
	}}
	if rec.RateLimitRPS > 0 && rec.BurstSize == 0 {
		rec.BurstSize = rec.RateLimitRPS
	}
	next := cur.clone()
	next.keys[id] = &entry{rec: rec, lim: withLimits(nil, rec.RateLimitRPS, rec.BurstSize, rec.TokensPerMin, r.share, now), usage: &Usage{}}
	if err := r.commit(next); err != nil {
		return Created{}, err
	}
	return Created{KeyView: rec.view(), RawKey: raw}, nil
}

func (rec *record) view() KeyView {
	v := rec.KeyView
	v.AllowedModels = slices.Clone(v.AllowedModels)
	return v
}

// List returns every key (tenant "" = all), ordered by tenant then name.
func (r *Registry) List(tenantID string) []KeyView {
	s := r.snap.Load()
	out := make([]KeyView, 0, len(s.keys))
	for _, e := range s.keys {
		if tenantID == "" || e.rec.TenantID == tenantID {
			out = append(out, e.rec.view())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].TenantID != out[j].TenantID {
			return out[i].TenantID < out[j].TenantID
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Get returns one key.
func (r *Registry) Get(id string) (KeyView, error) {
	e, ok := r.snap.Load().keys[id]
	if !ok {
		return KeyView{}, notFound(id)
	}
	return e.rec.view(), nil
}

// Patch changes a key's allow-list, limits, enabled flag or expiry. Buckets
// keep what was spent.
func (r *Registry) Patch(id string, p KeyPatch) (KeyView, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	e, ok := cur.keys[id]
	if !ok {
		return KeyView{}, notFound(id)
	}
	rec := *e.rec
	if p.AllowedModels != nil {
		if err := checkModels(*p.AllowedModels); err != nil {
			return KeyView{}, err
		}
		rec.AllowedModels = slices.Clone(*p.AllowedModels)
	}
	rps, burst := p.RateLimitRPS, p.BurstSize
	if rps == nil && rec.RateLimitRPS > 0 {
		rps = &rec.RateLimitRPS
	}
	if burst == nil && p.RateLimitRPS == nil && rec.BurstSize > 0 {
		burst = &rec.BurstSize
	}
	if err := checkRates(rps, burst); err != nil {
		return KeyView{}, err
	}
	rec.RateLimitRPS, rec.BurstSize = deref(rps), deref(burst)
	if rec.RateLimitRPS > 0 && rec.BurstSize == 0 {
		rec.BurstSize = rec.RateLimitRPS
	}
	if p.TokensPerMin != nil {
		if err := checkLimit(FieldTokensPerMin, p.TokensPerMin); err != nil {
			return KeyView{}, err
		}
		rec.TokensPerMin = *p.TokensPerMin
	}
	if p.Enabled != nil {
		rec.Enabled = *p.Enabled
	}
	if p.ExpiresAt != nil {
		rec.ExpiresAt = p.ExpiresAt
	}
	if p.MaxPriority != nil {
		v := *p.MaxPriority
		if err := checkPriority(&v); err != nil {
			return KeyView{}, err
		}
		rec.MaxPriority = v
	}
	next := cur.clone()
	next.keys[id] = &entry{rec: &rec, lim: withLimits(e.lim, rec.RateLimitRPS, rec.BurstSize, rec.TokensPerMin, r.share, r.now()), usage: e.usage}
	if err := r.commit(next); err != nil {
		return KeyView{}, err
	}
	return rec.view(), nil
}

// Delete removes a key; it stops working at once.
func (r *Registry) Delete(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	if _, ok := cur.keys[id]; !ok {
		return notFound(id)
	}
	next := cur.clone()
	delete(next.keys, id)
	return r.commit(next)
}

// SetTenantLimit creates or replaces a tenant's ceilings.
func (r *Registry) SetTenantLimit(t TenantLimit) (TenantLimit, error) {
	if err := t.validate(); err != nil {
		return TenantLimit{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	var prev *limits
	if old, ok := cur.tenants[t.TenantID]; ok {
		prev = old.lim
	}
	next := cur.clone()
	next.tenants[t.TenantID] = &tenantEntry{limit: t, lim: withLimits(prev, deref(t.RPS), deref(t.RPS), deref(t.TokensPerMin), r.share, r.now())}
	if err := r.commit(next); err != nil {
		return TenantLimit{}, err
	}
	return t, nil
}

// DeleteTenantLimit removes a tenant's ceilings (its keys keep their own).
func (r *Registry) DeleteTenantLimit(tenantID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.snap.Load()
	if _, ok := cur.tenants[tenantID]; !ok {
		return apierror.New(http.StatusNotFound, CodeTenantNotFound, FieldTenantID, "tenant not found", "tenant "+tenantID+" has no limits")
	}
	next := cur.clone()
	delete(next.tenants, tenantID)
	return r.commit(next)
}

// SetShare makes this replica enforce 1/n of every key's and tenant's
// limits (n < 1 is 1): the daemon sets n to the live replicas of a shared
// store, so N replicas behind an even spread admit about one limit in all.
// Buckets keep what was spent (in proportion to the old share).
func (r *Registry) SetShare(n int) {
	n = max(n, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if n == r.share {
		return
	}
	r.share = n
	cur, now := r.snap.Load(), r.now()
	next := cur.clone()
	for id, e := range cur.keys {
		next.keys[id] = &entry{rec: e.rec, lim: withLimits(e.lim, e.rec.RateLimitRPS, e.rec.BurstSize, e.rec.TokensPerMin, n, now), usage: e.usage}
	}
	for id, t := range cur.tenants {
		next.tenants[id] = &tenantEntry{limit: t.limit, lim: withLimits(t.lim, deref(t.limit.RPS), deref(t.limit.RPS), deref(t.limit.TokensPerMin), n, now)}
	}
	r.snap.Store(next) // nothing persisted changes
}

// Share is the current divisor of SetShare.
func (r *Registry) Share() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.share
}

// TenantLimits lists tenant ceilings (tenant "" = all).
func (r *Registry) TenantLimits(tenantID string) []TenantLimit {
	s := r.snap.Load()
	out := []TenantLimit{}
	for id, t := range s.tenants {
		if tenantID == "" || id == tenantID {
			out = append(out, t.limit)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TenantID < out[j].TenantID })
	return out
}

// KeyUsage returns a key's usage counters.
func (r *Registry) KeyUsage(id string) (UsageView, error) {
	e, ok := r.snap.Load().keys[id]
	if !ok {
		return UsageView{}, notFound(id)
	}
	return e.usage.view(id, e.rec.TenantID), nil
}
