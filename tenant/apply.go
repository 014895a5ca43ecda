package tenant

// Declarative (GitOps) application of kind: ApiKey and kind: TenantLimit
// documents. The same logic runs over the REST API (infergate apply -f) and
// against the daemon's own registry (--rules at boot), through KeyStore.

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"

	"github.com/infergate/infergate/apierror"
)

// Error codes of declarative key application.
const (
	// CodeKeyExists: an import named a key id that exists with the same
	// tenant, name and hash — the idempotent re-apply case.
	CodeKeyExists = "apikey_exists"
	// CodeKeyConflict: an import named an existing key id with another
	// hash, tenant or name; neither can change in place.
	CodeKeyConflict = "apikey_conflict"
)

// ErrKeyExists is in the chain of an import of an existing, identical key.
var ErrKeyExists = errors.New("tenant: key exists")

// ErrRaced is in the chain of a write another replica's write overtook
// (409 revision_conflict): declarative application retries it.
var ErrRaced = errors.New("tenant: raced another replica")

// applyAttempts bounds retries of a raced write (replicas booting with the
// same --rules all apply the same keys at once).
const applyAttempts = 5

func raced(err error) bool {
	if errors.Is(err, ErrRaced) {
		return true
	}
	e, ok := apierror.As(err)
	return ok && e.Code == apierror.CodeRevisionConflict
}

// retry runs fn until it succeeds, fails for another reason, or has raced
// applyAttempts times.
func retry(fn func() (Outcome, error)) (Outcome, error) {
	for i := 1; ; i++ {
		o, err := fn()
		if err == nil || !raced(err) || i == applyAttempts {
			return o, err
		}
	}
}

// importConflict is the answer to an import whose id is taken: "exists"
// (same tenant, name, hash: compared in constant time) or a conflict.
func importConflict(cur *record, spec KeySpec) *apierror.Error {
	h, _ := ParseKeyHash(spec.KeyHash) // validated by the caller
	sameHash := subtle.ConstantTimeCompare(h.salt[:], cur.Hash.salt[:])&subtle.ConstantTimeCompare(h.sum[:], cur.Hash.sum[:]) == 1
	switch {
	case !sameHash:
		return apierror.Conflict(CodeKeyConflict, FieldKeyHash, "key exists",
			"key "+spec.KeyID+" exists with another key_hash; a key's secret cannot change: mint a new key (new key_id) and delete the old one")
	case cur.TenantID != spec.TenantID:
		return apierror.Conflict(CodeKeyConflict, FieldTenantID, "key exists",
			"key "+spec.KeyID+" belongs to tenant "+cur.TenantID+"; a key cannot move: delete it first")
	case cur.Name != spec.Name:
		return apierror.Conflict(CodeKeyConflict, FieldName, "key exists",
			"key "+spec.KeyID+" is named "+cur.Name+"; a key cannot be renamed: delete it first")
	}
	e := apierror.Conflict(CodeKeyExists, FieldKeyID, "key exists", "a key with id "+spec.KeyID+" exists")
	e.Err = ErrKeyExists
	return e
}

// KeyStore is what declarative application needs: the REST client (cli)
// or the local registry (Registry.Local).
type KeyStore interface {
	CreateKey(ctx context.Context, s KeySpec) (Created, error)
	GetKey(ctx context.Context, id string) (KeyView, error)
	PatchKey(ctx context.Context, id string, p KeyPatch) (KeyView, error)
	TenantLimits(ctx context.Context, tenantID string) ([]TenantLimit, error)
	SetTenantLimit(ctx context.Context, t TenantLimit) (TenantLimit, error)
}

// Outcome of applying one document.
type Outcome string

// Outcomes, as apply prints them (the same words as for rules).
const (
	OutcomeCreated   Outcome = "created"
	OutcomeUpdated   Outcome = "updated"
	OutcomeUnchanged Outcome = "unchanged"
)

// ApplyKey makes the key of spec (an import: KeyID and KeyHash set) exist
// with spec's settings: created, updated through a PATCH of what differs,
// or unchanged.
func ApplyKey(ctx context.Context, ks KeyStore, spec KeySpec) (Outcome, error) {
	if spec.KeyID == "" || spec.KeyHash == "" {
		return "", needHash()
	}
	return retry(func() (Outcome, error) { return applyKeyOnce(ctx, ks, spec) })
}

func applyKeyOnce(ctx context.Context, ks KeyStore, spec KeySpec) (Outcome, error) {
	if _, err := ks.CreateKey(ctx, spec); err == nil {
		return OutcomeCreated, nil
	} else if !errors.Is(err, ErrKeyExists) {
		return "", err
	}
	cur, err := ks.GetKey(ctx, spec.KeyID)
	if err != nil {
		return "", fmt.Errorf("read key %s: %w", spec.KeyID, err)
	}
	p, changed, err := keyDiff(spec, cur)
	if err != nil || !changed {
		return OutcomeUnchanged, err
	}
	if _, err := ks.PatchKey(ctx, spec.KeyID, p); err != nil {
		return "", err
	}
	return OutcomeUpdated, nil
}

// keyDiff is the PATCH turning cur into spec. Absent limits mean "no
// limit"; PATCH cannot remove a limit or an expiry, so a file that drops
// one is refused rather than silently left stricter than it says.
func keyDiff(spec KeySpec, cur KeyView) (KeyPatch, bool, error) {
	var p KeyPatch
	changed := false
	want := slices.Clone(spec.AllowedModels)
	have := slices.Clone(cur.AllowedModels)
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		m := slices.Clone(spec.AllowedModels)
		if m == nil {
			m = []string{}
		}
		p.AllowedModels = &m
		changed = true
	}
	rps, tpm := deref(spec.RateLimitRPS), deref(spec.TokensPerMin)
	burst := deref(spec.BurstSize)
	if burst == 0 {
		burst = rps
	}
	if rps == 0 && cur.RateLimitRPS > 0 {
		return p, false, cannotRemove(FieldRateLimitRPS, cur.KeyID)
	}
	if rps != cur.RateLimitRPS || burst != cur.BurstSize {
		p.RateLimitRPS, p.BurstSize = &rps, &burst
		changed = true
	}
	if tpm == 0 && cur.TokensPerMin > 0 {
		return p, false, cannotRemove(FieldTokensPerMin, cur.KeyID)
	}
	if tpm != cur.TokensPerMin {
		p.TokensPerMin = &tpm
		changed = true
	}
	if en := spec.Enabled == nil || *spec.Enabled; en != cur.Enabled {
		p.Enabled = &en
		changed = true
	}
	if mp := spec.MaxPriority; mp != cur.MaxPriority { // validated: canonical
		p.MaxPriority = &mp
		changed = true
	}
	switch {
	case spec.ExpiresAt == nil && cur.ExpiresAt != nil:
		return p, false, cannotRemove(FieldExpiresAt, cur.KeyID)
	case spec.ExpiresAt != nil && (cur.ExpiresAt == nil || !spec.ExpiresAt.Equal(*cur.ExpiresAt)):
		p.ExpiresAt = spec.ExpiresAt
		changed = true
	}
	return p, changed, nil
}

func cannotRemove(field, id string) *apierror.Error {
	return apierror.BadRequest(apierror.CodeInvalidCombo, field, "cannot remove",
		"key "+id+" has "+field+" set and the file has none; a PATCH cannot remove it: delete the key and apply again (its secret stays valid)")
}

func needHash() *apierror.Error {
	return apierror.BadRequest(apierror.CodeInvalidCombo, FieldKeyID, "key_id and key_hash required",
		"a kind: ApiKey document needs key_id and key_hash (from `infergate apikey mint`): without them every apply would mint a new key")
}

// ApplyTenantLimit sets a tenant's ceilings unless they already are t.
func ApplyTenantLimit(ctx context.Context, ks KeyStore, t TenantLimit) (Outcome, error) {
	if err := t.validate(); err != nil {
		return "", err
	}
	return retry(func() (Outcome, error) { return applyTenantLimitOnce(ctx, ks, t) })
}

func applyTenantLimitOnce(ctx context.Context, ks KeyStore, t TenantLimit) (Outcome, error) {
	cur, err := ks.TenantLimits(ctx, t.TenantID)
	if err != nil {
		return "", fmt.Errorf("read tenant %s limits: %w", t.TenantID, err)
	}
	out := OutcomeCreated
	for _, c := range cur {
		if c.TenantID != t.TenantID {
			continue
		}
		if deref(c.RPS) == deref(t.RPS) && deref(c.TokensPerMin) == deref(t.TokensPerMin) {
			return OutcomeUnchanged, nil
		}
		out = OutcomeUpdated
	}
	if _, err := ks.SetTenantLimit(ctx, t); err != nil {
		return "", err
	}
	return out, nil
}

// Local is the registry as a KeyStore (the daemon's --rules at boot).
func (r *Registry) Local() KeyStore { return localStore{r} }

type localStore struct{ r *Registry }

func (l localStore) CreateKey(_ context.Context, s KeySpec) (Created, error) { return l.r.Create(s) }
func (l localStore) GetKey(_ context.Context, id string) (KeyView, error)    { return l.r.Get(id) }
func (l localStore) PatchKey(_ context.Context, id string, p KeyPatch) (KeyView, error) {
	return l.r.Patch(id, p)
}
func (l localStore) TenantLimits(_ context.Context, id string) ([]TenantLimit, error) {
	return l.r.TenantLimits(id), nil
}
func (l localStore) SetTenantLimit(_ context.Context, t TenantLimit) (TenantLimit, error) {
	return l.r.SetTenantLimit(t)
}
