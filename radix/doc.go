// Package radix is the Tier-1 prefix-affinity index of P/D rules: it
// remembers which endpoint served which prompt and, for a new prompt, names
// the endpoint among the caller's candidates that shares the longest prefix
// with it. It records what the gateway routed, not what an engine holds in its
// KV cache (that is kvexact's job). It is a pure data structure: no HTTP, no
// ZMQ, no logging.
//
// # Keys
//
// Keys are whole canonical prompt keys (CompletionKey, ChatKey), clipped to
// Options.MaxKeyBytes (256 KiB), not LoxiLB's 511-byte head. Chat keys
// serialise messages in order (role, then content parts) so conversations
// with the same system prompt and history share a byte prefix.
//
// # Longest shared prefix
//
// armon/go-radix's LongestPrefix only finds a stored key that is a prefix of
// the query; two prompts that share a system prompt and then diverge would
// not match. Instead every key is cut into Options.ChunkBytes chunks (128)
// and the XXH64 of every chunk-boundary prefix key[:n] (plus the whole key)
// is stored in a hash map with its owners. Match hashes the query
// incrementally along its boundaries and keeps the deepest one some
// candidate owns, so a shared prefix is found to chunk granularity (or
// exactly, when the query equals a stored key). Inserts touch a key's
// prefixes deepest first, so a prefix is always at least as recent as its
// extensions; LRU eviction then trims keys from their tails, the stored set
// stays prefix-closed and Match stops at the first unknown boundary.
// Collisions of 64-bit hashes are ignored (p ≈ n²/2⁶⁵, about 10⁻⁷ for a
// million entries) and could only misdirect affinity, never pick a
// non-candidate.
//
// # Contract for the ladder
//
//   - Match(key, candidates) only ever returns one of candidates; an empty set
//     matches nothing. MatchRate(key, matched) is the figure to compare with
//     pd_cache_threshold/100. Match does not refresh recency.
//   - Insert(key, endpoint) after the final choice (Tier-1 hit or Tier-2
//     decision): the most recent owner of a prefix wins; each prefix keeps
//     its four most recent distinct owners so an excluded owner does not hide
//     an eligible older one.
//   - RemoveEndpoint(endpoint) when an endpoint goes down or its breaker
//     opens: O(entries), rare.
//   - Entries, SizeBytes and Stats feed the gauges (metrics.Radix).
//
// # Memory
//
// SizeBytes accounts 64 bytes per entry plus 64 bytes and the name per
// endpoint, and never exceeds Options.BudgetBytes (64 MiB, about a million
// entries, i.e. 128 MiB of distinct prompt text at 128-byte chunks).
// hashicorp/golang-lru is not used: it bounds entry counts, costs ~100+ bytes
// and several pointers per entry (all scanned by the GC) and cannot remove
// one endpoint from an entry in place; the index keeps an intrusive LRU list
// of int32 links in a pointer-free arena instead.
//
// # Measured (see bench_test.go; numbers filled in from the last run)
package radix
