package chwbl

import "github.com/cespare/xxhash/v2"

// Source says which routing key a Pick used; the datapath labels metrics
// with it.
type Source uint8

const (
	SourcePrefix     Source = iota // the prompt prefix hash
	SourceSession                  // the session key (user, conversation id)
	SourceRoundRobin               // neither: the next member in turn
)

func (s Source) String() string {
	switch s {
	case SourcePrefix:
		return "prefix"
	case SourceSession:
		return "session"
	case SourceRoundRobin:
		return "round_robin"
	}
	return "unknown"
}

// PrefixLevelBytes is how much of the canonical prompt key
// (radix.CompletionKey / radix.ChatKey) forms the routing key at each
// chwbl_prefix_hash_level: 1 = the first 256 bytes (roughly a system
// prompt's opening), 2 = 1 KiB, 3 = 4 KiB. Deeper levels separate more
// conversations and spread load more, shallower ones share more cache.
// Out-of-range levels use level 1.
func PrefixLevelBytes(level int) int {
	switch level {
	case 2:
		return 1 << 10
	case 3:
		return 4 << 10
	}
	return 256
}

// PrefixHash is the routing key of a canonical prompt key at level: XXH64
// of salt, a zero byte, then the key's first PrefixLevelBytes(level) bytes.
// salt carries whatever must separate caches on the same prompt (model,
// LoRA adapter, cache_salt, per chwbl_prefix_hash_flags); the caller builds
// it. ok is false for an empty key.
func PrefixHash(key []byte, level int, salt string) (uint64, bool) {
	if len(key) == 0 {
		return 0, false
	}
	key = key[:min(len(key), PrefixLevelBytes(level))]
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(salt)
	_, _ = d.Write([]byte{0})
	_, _ = d.Write(key)
	return d.Sum64(), true
}

// SessionHash is the routing key of a session key; ok is false when empty.
func SessionHash(session string) (uint64, bool) {
	if session == "" {
		return 0, false
	}
	return xxhash.Sum64String(session), true
}

// Key picks the routing key in priority order: the prefix hash, then the
// session hash, then round-robin (the first vnode of the next member in
// turn, so consecutive keyless requests start at successive members and the
// bound still applies).
func (r *Ring) Key(prefixKey []byte, level int, salt, session string) (uint64, Source) {
	if h, ok := PrefixHash(prefixKey, level, salt); ok {
		return h, SourcePrefix
	}
	if h, ok := SessionHash(session); ok {
		return h, SourceSession
	}
	return r.roundRobin(), SourceRoundRobin
}

func (r *Ring) roundRobin() uint64 {
	if r.members == 0 {
		return 0
	}
	for range r.members {
		i := int((r.rr.Add(1) - 1) % uint64(r.members))
		if f := r.firsts[i]; f.ok {
			return f.hash
		}
	}
	return 0
}
