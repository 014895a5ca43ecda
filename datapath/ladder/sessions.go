package ladder

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Pin is a session's (prefill, decode) pair.
type Pin struct {
	Prefill, Decode string
	expires         time.Time
}

// Sessions is the Tier 0 table: session key → pinned pair, with a sliding
// TTL (every hit extends it) and a hard cap on entries so a flood of
// one-off session keys cannot grow memory without bound (least recently
// used pins go first).
type Sessions struct {
	ttl   time.Duration
	cache *lru.Cache[string, Pin]
}

// DefaultMaxSessions bounds the Tier 0 table of one rule.
const DefaultMaxSessions = 100_000

// NewSessions builds a table; ttl must be positive (compile resolves 0 → 300 s).
func NewSessions(ttl time.Duration, maxEntries int) *Sessions {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxSessions
	}
	c, err := lru.New[string, Pin](maxEntries)
	if err != nil {
		panic(err) // only for size <= 0, excluded above
	}
	return &Sessions{ttl: ttl, cache: c}
}

// Lookup returns a live pin and slides its expiry.
func (s *Sessions) Lookup(key string, now time.Time) (Pin, bool) {
	p, ok := s.cache.Get(key)
	if !ok {
		return Pin{}, false
	}
	if now.After(p.expires) {
		s.cache.Remove(key)
		return Pin{}, false
	}
	p.expires = now.Add(s.ttl)
	s.cache.Add(key, p)
	return p, true
}

// Peek returns a live pin without sliding its expiry or touching recency.
func (s *Sessions) Peek(key string, now time.Time) (Pin, bool) {
	p, ok := s.cache.Peek(key)
	if !ok || now.After(p.expires) {
		return Pin{}, false
	}
	return p, true
}

// Pin records (or refreshes) the pair for key.
func (s *Sessions) Pin(key, prefill, decode string, now time.Time) {
	s.cache.Add(key, Pin{Prefill: prefill, Decode: decode, expires: now.Add(s.ttl)})
}

// Drop forgets key (its pinned endpoint became unusable).
func (s *Sessions) Drop(key string) { s.cache.Remove(key) }

// DropEndpoint forgets every pin that uses endpoint id, so a session whose
// engine went down re-chooses at once instead of on its next request.
func (s *Sessions) DropEndpoint(id string) {
	for _, k := range s.cache.Keys() {
		if p, ok := s.cache.Peek(k); ok && (p.Prefill == id || p.Decode == id) {
			s.cache.Remove(k)
		}
	}
}

// Len is the number of pins held (for a gauge).
func (s *Sessions) Len() int { return s.cache.Len() }
