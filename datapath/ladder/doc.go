// Package ladder picks the (prefill, decode) pair for a P/D request.
//
// The ladder runs its tiers in a fixed order and the first tier that makes a
// choice wins:
//
//	Tier 0   session stickiness  (always on for P/D: X-Conversation-Id, else body "user")
//	Tier 1   prefix affinity     (pd_cache_aware_mode; radix index)
//	Tier 1.5 KV-exact            (kvExactMode 1; engine block inventory)
//	Tier 2   load fallback       (lowest active+queued, round-robin only on exact ties)
//
// Decode: the pinned decode when usable, else the least loaded.
//
// Each prefill tier is one file implementing pick.Picker (PrefillTier): it
// gets the request facts and the usable candidates and returns a choice or an
// explicit fall-through reason. The tiers run through pick.First, which
// enforces the invariant that only one of the given (usable: healthy,
// breaker-closed, non-draining) candidates is returned; every step lands in
// a Trace, so metrics and the routing explanation come from one place. The
// caller excludes unusable endpoints before calling. Candidates, facts, the
// load guard and the least-loaded and rendezvous tie-breaks are the pick
// package's, shared with single-pool selection.
package ladder
