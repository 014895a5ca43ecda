package tenant

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names a client may carry its key in. X-Api-Key is LoxiLB's;
// Authorization: Bearer is what OpenAI SDKs send.
const (
	HeaderAPIKey        = "X-Api-Key"
	HeaderAuthorization = "Authorization"
	bearerPrefix        = "Bearer "
)

// KeyFromHeader returns the presented key: X-Api-Key, else a Bearer token.
func KeyFromHeader(h http.Header) string {
	if v := h.Get(HeaderAPIKey); v != "" {
		return strings.TrimSpace(v)
	}
	if v := h.Get(HeaderAuthorization); len(v) > len(bearerPrefix) && strings.EqualFold(v[:len(bearerPrefix)], bearerPrefix) {
		return strings.TrimSpace(v[len(bearerPrefix):])
	}
	return ""
}

// StripKey removes the client's credential so it never reaches an engine.
func StripKey(h http.Header) {
	h.Del(HeaderAPIKey)
	h.Del(HeaderAuthorization)
}

// Check is what admission needs to know about one request.
type Check struct {
	Key      string // as presented ("" none)
	ClientIP string
	Model    string
	// Estimate is the tokens to reserve; ≤ 0 reserves Estimate(PromptBytes,
	// Shape, registry's DefaultMaxTokens).
	Estimate int
	// PromptBytes and Shape describe the request for the reservation when
	// Estimate is not given.
	PromptBytes int
	Shape       RequestShape
}

// Estimate is the reservation for a request before the engine answers: a
// byte heuristic for the prompt (4 bytes a token, rounded up) plus the
// completion ceiling the client asked for (s.MaxTokens; none: def) for each
// of the choices the engine generates. A client that names no ceiling
// still reserves def per choice, so leaving it out buys nothing.
func Estimate(promptBytes int, s RequestShape, def int) int {
	ceiling := s.MaxTokens
	if ceiling <= 0 {
		ceiling = def
	}
	return (promptBytes+3)/4 + ceiling*max(s.Choices, 1)
}

// quotas are the two dimensions reported in x-ratelimit-* headers.
type quotas struct {
	req, tok       quota
	hasReq, hasTok bool
}

// Admission is an admitted request. Settle it exactly once.
type Admission struct {
	e        *entry
	t        *tenantEntry
	reserved int
	q        quotas
	now      func() time.Time
}

// KeyID names the key (for metrics and logs; not a secret).
func (a *Admission) KeyID() string { return a.e.rec.KeyID }

// TenantID names the key's tenant.
func (a *Admission) TenantID() string { return a.e.rec.TenantID }

// RestrictsModels reports whether the key has a model allow-list.
func (a *Admission) RestrictsModels() bool { return len(a.e.rec.AllowedModels) > 0 }

// MaxPriority is the highest priority class the key grants (a canonical
// class name; "" when the key names none and the gateway's default grant
// applies).
func (a *Admission) MaxPriority() string { return a.e.rec.MaxPriority }

// Reserved is the token estimate taken at admission.
func (a *Admission) Reserved() int { return a.reserved }

// Denial is a refused request: status, stable code, message and when to
// retry.
type Denial struct {
	// KeyID and TenantID name the key when one was recognised (disabled,
	// expired, over its limits), for metrics; empty for unknown keys.
	KeyID, TenantID string
	Status          int
	Code            string
	Message         string
	RetryAfter      time.Duration
	q               quotas
}

// Admit checks a request against the key and tenant ceilings. On success
// the request's share (one request, Estimate tokens) is taken from every
// bucket that applies; on refusal nothing is taken.
func (r *Registry) Admit(c Check) (Admission, *Denial) {
	now := r.now()
	// The key is checked first and only failures are limited: a source
	// that failed too often is refused its further failures, never a valid
	// key (behind one NAT address, one client's bad keys must not lock out
	// every tenant). An unknown key id costs a map lookup, a wrong secret
	// one hash, so checking before refusing stays cheap.
	src := failureSource(c.ClientIP)
	e, d := r.authenticate(c.Key, now)
	if d != nil {
		if blocked, retry := r.authFail.blocked(src, now); blocked {
			return Admission{}, &Denial{Status: http.StatusTooManyRequests, Code: CodeAuthRateLimited, RetryAfter: retry,
				Message: "too many failed API key checks from this address; retry later"}
		}
		r.authFail.fail(src, now)
		return Admission{}, d
	}
	if !e.rec.allows(c.Model) {
		e.usage.rejected.Add(1)
		return Admission{}, &Denial{KeyID: e.rec.KeyID, TenantID: e.rec.TenantID, Status: http.StatusForbidden, Code: CodeModelNotAllowed,
			Message: "this API key may not use model " + strconv.Quote(c.Model)}
	}
	est := c.Estimate
	if est <= 0 {
		est = Estimate(c.PromptBytes, c.Shape, r.opts.DefaultMaxTokens)
	}
	t := r.snap.Load().tenants[e.rec.TenantID]
	var tl *limits
	if t != nil {
		tl = t.lim
	}
	var q quotas
	// Requests first (key, then tenant), then tokens; a later refusal gives
	// back what earlier buckets took.
	var taken [4]*bucket
	var costs [4]float64
	n := 0
	steps := [4]struct {
		b          *bucket
		need, cost float64
		tok        bool
		code, msg  string
	}{
		{bucketOf(e.lim, false), 1, 1, false, CodeRateLimited, "API key request rate limit reached"},
		{bucketOf(tl, false), 1, 1, false, CodeRateLimited, "tenant request rate limit reached"},
		{bucketOf(e.lim, true), 1, float64(est), true, CodeTokensExhausted, "API key token limit (tokens per minute) reached"},
		{bucketOf(tl, true), 1, float64(est), true, CodeTokensExhausted, "tenant token limit (tokens per minute) reached"},
	}
	for _, s := range steps {
		if s.b == nil {
			continue
		}
		ok, bq := s.b.take(s.need, s.cost, now)
		q.note(bq, s.tok)
		if !ok {
			for i := 0; i < n; i++ {
				taken[i].give(costs[i], now)
			}
			e.usage.rejected.Add(1)
			return Admission{}, &Denial{KeyID: e.rec.KeyID, TenantID: e.rec.TenantID, Status: http.StatusTooManyRequests, Code: s.code, Message: s.msg, RetryAfter: bq.retry, q: q}
		}
		taken[n], costs[n] = s.b, s.cost
		n++
	}
	e.usage.requests.Add(1)
	return Admission{e: e, t: t, reserved: est, q: q, now: r.now}, nil
}

func bucketOf(l *limits, tokens bool) *bucket {
	if l == nil {
		return nil
	}
	if tokens {
		return l.tokens
	}
	return l.requests
}

// note keeps, per dimension, the most restrictive quota seen.
func (q *quotas) note(bq quota, tokens bool) {
	dst, has := &q.req, &q.hasReq
	if tokens {
		dst, has = &q.tok, &q.hasTok
	}
	if !*has || bq.remaining < dst.remaining {
		*dst, *has = bq, true
	}
}

// authenticate finds and checks the key: one map lookup by id, one hash.
func (r *Registry) authenticate(raw string, now time.Time) (*entry, *Denial) {
	if raw == "" {
		return nil, &Denial{Status: http.StatusUnauthorized, Code: CodeInvalidAPIKey,
			Message: "this endpoint needs an API key: send it in X-Api-Key or Authorization: Bearer"}
	}
	id, secret, err := splitKey(raw)
	if err != nil {
		return nil, invalidKey()
	}
	e, ok := r.snap.Load().keys[id]
	if !ok || !e.rec.Hash.matches(secret) {
		return nil, invalidKey()
	}
	if !e.rec.Enabled {
		e.usage.rejected.Add(1)
		return nil, &Denial{KeyID: e.rec.KeyID, TenantID: e.rec.TenantID, Status: http.StatusUnauthorized, Code: CodeKeyDisabled, Message: "the API key is disabled"}
	}
	if e.rec.ExpiresAt != nil && !now.Before(*e.rec.ExpiresAt) {
		e.usage.rejected.Add(1)
		return nil, &Denial{KeyID: e.rec.KeyID, TenantID: e.rec.TenantID, Status: http.StatusUnauthorized, Code: CodeKeyExpired, Message: "the API key expired at " + e.rec.ExpiresAt.UTC().Format(time.RFC3339)}
	}
	return e, nil
}

func invalidKey() *Denial {
	return &Denial{Status: http.StatusUnauthorized, Code: CodeInvalidAPIKey, Message: "the API key is not valid"}
}

// Settle replaces the reservation with what the request really used:
// known reports whether the engine said (usage); without it the reservation
// stands as the charge and the request is counted as estimated.
func (a *Admission) Settle(promptTokens, completionTokens int, known bool) {
	if a.e == nil {
		return
	}
	now := a.now()
	used := a.reserved
	if known {
		used = promptTokens + completionTokens
		a.e.usage.promptTokens.Add(int64(promptTokens))
		a.e.usage.complTokens.Add(int64(completionTokens))
	} else {
		a.e.usage.estimated.Add(1)
	}
	refund := float64(a.reserved - used)
	if b := a.e.lim.tokens; b != nil {
		b.give(refund, now)
	}
	if a.t != nil && a.t.lim.tokens != nil {
		a.t.lim.tokens.give(refund, now)
	}
	a.e, a.t = nil, nil
}

// WriteHeaders sets OpenAI's x-ratelimit-* headers for the dimensions that
// are limited.
func (a *Admission) WriteHeaders(h http.Header) { a.q.write(h) }

// WriteHeaders sets Retry-After and the x-ratelimit-* headers of a refusal.
func (d *Denial) WriteHeaders(h http.Header) {
	if d.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10))
	}
	d.q.write(h)
}

func (q *quotas) write(h http.Header) {
	if q.hasReq {
		writeQuota(h, &requestHeaders, q.req)
	}
	if q.hasTok {
		writeQuota(h, &tokenHeaders, q.tok)
	}
}

// quotaHeaders are OpenAI's x-ratelimit-* names for one dimension, in
// canonical form so setting them needs no canonicalisation.
type quotaHeaders struct{ limit, remaining, reset string }

var (
	requestHeaders = quotaHeaders{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"}
	tokenHeaders   = quotaHeaders{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"}
)

func writeQuota(h http.Header, n *quotaHeaders, q quota) {
	h[n.limit] = []string{strconv.FormatInt(int64(q.limit), 10)}
	h[n.remaining] = []string{strconv.FormatInt(int64(q.remaining), 10)}
	h[n.reset] = []string{q.reset.Round(time.Millisecond).String()}
}
