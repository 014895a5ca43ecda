// Package chwbl is consistent hashing with bounded loads, the single-pool
// prefix-affinity selector of sel 8 (and sel 10, the weighted ring).
//
// # Ring
//
// NewRing places Options.Replication virtual nodes (chwbl_replication,
// default 100) per member at XXH64(ID "#" j). Positions depend only on the
// member's ID, so removing a member moves only the keys its vnodes held
// (TestStabilityOnRemoval). With Options.Weighted (sel 10) member i gets
// ceil(Replication × weight_i / max weight) vnodes; weight 0 gets none. A
// ring is built once per compiled rule and is immutable apart from the
// round-robin cursor (an atomic); member indices are the rule's endpoint
// indices.
//
// # Routing key
//
// Ring.Key picks, in order: PrefixHash of the canonical prompt key
// (radix.CompletionKey / radix.ChatKey) cut at chwbl_prefix_hash_level
// (1: 256 bytes, 2: 1 KiB, 3: 4 KiB; see PrefixLevelBytes), salted with
// whatever must separate caches (model, LoRA, cache_salt: the caller builds
// the salt from chwbl_prefix_hash_flags); then SessionHash of the session
// key; then round-robin (the first vnode of the next member in turn).
//
// # Bounded load
//
// Pick walks clockwise from the key and takes the first eligible member with
// load+1 ≤ ceil(chwbl_mean_load_factor/100 × (Σload+1)/n) over the n
// eligible members (Bound). Unlike LoxiLB, the bound applies to prefix keys
// too: a hot system prompt spreads over neighbours instead of saturating one
// engine. Options.MinBound can floor the bound so a lightly loaded fleet
// keeps strict affinity (LoxiLB floors it at n while Σload < n). If nothing
// is within the bound (possible only when loads change during the walk) the
// least loaded eligible member seen wins; ok is false only when no eligible
// member has vnodes. Pick calls the caller's load and eligible functions
// (never stored), does not allocate and takes no lock.
//
// # Measured
//
// BenchmarkPick, 32 members × 100 vnodes, one member ineligible, on a noisy
// shared 2-core box: ~210 ns per Pick, 0 allocs, 1.8× the cost of the
// hash-modulo baseline (sel 9) timed in the same loop, most of it reading
// 32 loads for the mean. A hot home over the bound costs the same (1.65×).
package chwbl
