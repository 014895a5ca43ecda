package tenant

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/datapath/flow"
)

// Wire field names (LoxiLB's spellings), used in error field paths.
const (
	FieldTenantID      = "tenant_id"
	FieldName          = "name"
	FieldAllowedModels = "allowed_models"
	FieldRateLimitRPS  = "rate_limit_rps"
	FieldBurstSize     = "burst_size"
	FieldTokensPerMin  = "tokens_per_min"
	FieldEnabled       = "enabled"
	FieldExpiresAt     = "expires_at"
	FieldKeyHash       = "key_hash"
	FieldKeyID         = "key_id"
	FieldRPS           = "rps"
	FieldMaxPriority   = "max_priority"
)

// Stable error codes of the key API and of enforcement on a VIP.
const (
	CodeKeyNotFound     = "apikey_not_found"
	CodeDuplicateName   = "duplicate_name"
	CodeTooManyKeys     = "too_many_keys"
	CodeInvalidAPIKey   = "invalid_api_key"
	CodeKeyDisabled     = "api_key_disabled"
	CodeKeyExpired      = "api_key_expired"
	CodeModelNotAllowed = "model_not_allowed"
	CodeRateLimited     = "rate_limit_exceeded"
	CodeTokensExhausted = "token_limit_exceeded"
	CodeAuthRateLimited = "auth_rate_limited"
	CodeTenantNotFound  = "tenant_not_found"
)

const (
	maxIDLen     = 128 // tenant_id, name, model names
	maxModels    = 256
	maxLimit     = 1 << 30
	maxKeysTotal = 100000
)

// KeySpec is the writable part of an API key: the POST body, and the YAML
// of kind: ApiKey. Limits are pointers so "absent" (no limit) differs from an
// explicit value; an explicit value must be ≥ 1.
type KeySpec struct {
	TenantID      string     `json:"tenant_id" yaml:"tenant_id"`
	Name          string     `json:"name" yaml:"name"`
	AllowedModels []string   `json:"allowed_models,omitempty" yaml:"allowed_models,omitempty"`
	RateLimitRPS  *int       `json:"rate_limit_rps,omitempty" yaml:"rate_limit_rps,omitempty"`
	BurstSize     *int       `json:"burst_size,omitempty" yaml:"burst_size,omitempty"`
	TokensPerMin  *int       `json:"tokens_per_min,omitempty" yaml:"tokens_per_min,omitempty"`
	Enabled       *bool      `json:"enabled,omitempty" yaml:"enabled,omitempty"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty" yaml:"expires_at,omitempty"`
	// MaxPriority is the highest priority class the key's requests may ask
	// for (x-request-priority, x-gateway-inference-objective): low,
	// standard or high; empty: the gateway's --flow-key-max-class. A
	// request asking above it gets it; one asking for nothing gets the
	// default class, never above it.
	MaxPriority string `json:"max_priority,omitempty" yaml:"max_priority,omitempty"`
	// KeyID and KeyHash import a key minted offline (GitOps): the secret
	// itself never reaches the gateway. Both or neither.
	KeyID   string `json:"key_id,omitempty" yaml:"key_id,omitempty"`
	KeyHash string `json:"key_hash,omitempty" yaml:"key_hash,omitempty"`
}

// KeyPatch is a PATCH body: only the fields present change.
type KeyPatch struct {
	AllowedModels *[]string  `json:"allowed_models,omitempty"`
	RateLimitRPS  *int       `json:"rate_limit_rps,omitempty"`
	BurstSize     *int       `json:"burst_size,omitempty"`
	TokensPerMin  *int       `json:"tokens_per_min,omitempty"`
	Enabled       *bool      `json:"enabled,omitempty"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
	MaxPriority   *string    `json:"max_priority,omitempty"` // "" returns to the gateway's default grant
}

// KeyView is a key as GET shows it: every setting, never key material.
type KeyView struct {
	KeyID         string     `json:"key_id"`
	TenantID      string     `json:"tenant_id"`
	Name          string     `json:"name"`
	KeyPrefix     string     `json:"key_prefix"` // "lxb_<id>_", to recognise a key
	AllowedModels []string   `json:"allowed_models,omitempty"`
	RateLimitRPS  int        `json:"rate_limit_rps,omitempty"`
	BurstSize     int        `json:"burst_size,omitempty"`
	TokensPerMin  int        `json:"tokens_per_min,omitempty"`
	Enabled       bool       `json:"enabled"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
	MaxPriority   string     `json:"max_priority,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
}

// Created is the answer to a create: the view plus the raw key, shown once.
// An imported (hash-only) key has no raw key.
type Created struct {
	KeyView
	RawKey string `json:"raw_key,omitempty"`
}

// TenantLimit is a tenant's ceiling over all its keys.
type TenantLimit struct {
	TenantID     string `json:"tenant_id" yaml:"tenant_id"`
	RPS          *int   `json:"rps,omitempty" yaml:"rps,omitempty"`
	TokensPerMin *int   `json:"tokens_per_min,omitempty" yaml:"tokens_per_min,omitempty"`
}

// record is one stored key.
type record struct {
	KeyView
	Hash KeyHash
}

func (r *record) allows(model string) bool {
	return len(r.AllowedModels) == 0 || slices.Contains(r.AllowedModels, model)
}

func invalid(field, msg string) *apierror.Error {
	return apierror.BadRequest(apierror.CodeInvalidField, field, msg, msg)
}

// checkIdent validates a tenant id or key name: 1..128 printable characters.
func checkIdent(field, v string) *apierror.Error {
	switch {
	case v == "":
		return invalid(field, field+" is required")
	case len(v) > maxIDLen:
		return invalid(field, field+" must be at most 128 bytes")
	case !utf8.ValidString(v):
		return invalid(field, field+" must be valid UTF-8")
	case strings.IndexFunc(v, func(r rune) bool { return unicode.IsControl(r) }) >= 0:
		return invalid(field, field+" must not contain control characters")
	}
	return nil
}

// checkLimit validates an optional ceiling: absent is no limit, present ≥ 1.
func checkLimit(field string, v *int) *apierror.Error {
	if v == nil {
		return nil
	}
	if *v < 1 || *v > maxLimit {
		return invalid(field, field+" must be between 1 and 1073741824 (omit it for no limit)")
	}
	return nil
}

func checkModels(models []string) *apierror.Error {
	if len(models) > maxModels {
		return invalid(FieldAllowedModels, "allowed_models lists at most 256 models")
	}
	seen := make(map[string]bool, len(models))
	for i, m := range models {
		f := FieldAllowedModels + "[" + strconv.Itoa(i) + "]"
		if err := checkIdent(f, m); err != nil {
			return err
		}
		if seen[m] {
			return invalid(f, "model "+m+" is listed twice")
		}
		seen[m] = true
	}
	return nil
}

// checkRates validates rate_limit_rps and burst_size together: a burst needs
// a rate, and may not be below it (a bucket smaller than one second's refill
// could never admit the configured rate).
func checkRates(rps, burst *int) *apierror.Error {
	if err := checkLimit(FieldRateLimitRPS, rps); err != nil {
		return err
	}
	if err := checkLimit(FieldBurstSize, burst); err != nil {
		return err
	}
	if burst != nil && rps == nil {
		return apierror.BadRequest(apierror.CodeInvalidCombo, FieldBurstSize, "burst_size needs rate_limit_rps", "burst_size needs rate_limit_rps")
	}
	if burst != nil && *burst < *rps {
		return apierror.BadRequest(apierror.CodeInvalidCombo, FieldBurstSize, "burst_size must be at least rate_limit_rps", "burst_size must be at least rate_limit_rps")
	}
	return nil
}

func (s *KeySpec) validate() *apierror.Error {
	if err := checkIdent(FieldTenantID, s.TenantID); err != nil {
		return err
	}
	if err := checkIdent(FieldName, s.Name); err != nil {
		return err
	}
	if err := checkModels(s.AllowedModels); err != nil {
		return err
	}
	if err := checkRates(s.RateLimitRPS, s.BurstSize); err != nil {
		return err
	}
	if err := checkLimit(FieldTokensPerMin, s.TokensPerMin); err != nil {
		return err
	}
	if err := checkPriority(&s.MaxPriority); err != nil {
		return err
	}
	if (s.KeyID == "") != (s.KeyHash == "") {
		return apierror.BadRequest(apierror.CodeInvalidCombo, FieldKeyHash, "key_id and key_hash go together", "key_id and key_hash go together (import of a key minted with `infergate apikey mint`)")
	}
	if s.KeyID != "" && !validID(s.KeyID) {
		return invalid(FieldKeyID, "key_id must be 16 lower-case hex digits")
	}
	if s.KeyHash != "" {
		if _, err := ParseKeyHash(s.KeyHash); err != nil {
			return invalid(FieldKeyHash, err.Error())
		}
	}
	return nil
}

// checkPriority validates a max_priority and rewrites it to the class's
// canonical name ("" stays: the gateway's default grant).
func checkPriority(v *string) *apierror.Error {
	if *v == "" {
		return nil
	}
	c, ok := flow.ParseClass(*v)
	if !ok {
		return invalid(FieldMaxPriority, "max_priority must be one of "+strings.Join(flow.Names(), ", ")+" (or empty for the gateway's default)")
	}
	*v = c.String()
	return nil
}

func (t *TenantLimit) validate() *apierror.Error {
	if err := checkIdent(FieldTenantID, t.TenantID); err != nil {
		return err
	}
	if err := checkLimit(FieldRPS, t.RPS); err != nil {
		return err
	}
	if err := checkLimit(FieldTokensPerMin, t.TokensPerMin); err != nil {
		return err
	}
	if t.RPS == nil && t.TokensPerMin == nil {
		return invalid(FieldRPS, "a tenant limit needs rps, tokens_per_min or both")
	}
	return nil
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// notFound is the 404 of an unknown key id.
func notFound(id string) *apierror.Error {
	return apierror.New(http.StatusNotFound, CodeKeyNotFound, FieldKeyID, "apikey not found", "no API key with id "+id)
}
