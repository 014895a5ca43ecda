// Package pick is the one place an endpoint is chosen. Every selection the
// gateway makes — a single pool's mode (rr, source hash, smooth WRR,
// persistence, least-connections, CHWBL), KV-exact on a single pool, and
// every rung of the P/D ladder (session, rendezvous, prefix, KV-exact, load,
// decode) — is expressed over one Candidate type, so a new fact about an
// endpoint (an engine's queue depth, its KV pressure, an estimated cost)
// is added to Candidate once and every choice can use it.
//
// # Contract
//
// A Candidate carries an endpoint's identity (ID, Index in the rule), its
// static facts (Weight, Backup) and its load, either as a snapshot (Load)
// or through pointers to the live atomics the datapath owns (Live). Pickers
// read facts; they never write them, and they never see an endpoint that is
// not a candidate.
//
// Two shapes share that type, because they differ in what a pick may cost:
//
//   - Picker (one method and a typed Name, as Caddy's Selector and llm-d's
//     scheduler plugins) chooses from a snapshot []Candidate and either
//     returns an index or falls through with a reason. First runs pickers
//     in order, records one Step each (metrics and the routing explanation
//     come from these), and enforces the invariant that a choice outside
//     the given candidates is a fall-through. DryPicker lets an explanation
//     run without side effects; Observer lets a picker learn from the final
//     choice, whoever made it. The P/D ladder's tiers and KV-exact mode 3
//     are Pickers.
//   - Pool is a single-pool rule's candidates plus the state its mode keeps
//     between requests (a shared cursor, smooth-WRR weights). Its modes read
//     Live facts on demand instead of snapshotting, so round-robin over 32
//     endpoints touches one of them, and Pool.Pick allocates nothing:
//     exclusions are a bitmask, the WRR cycle is precomputed, the breaker's
//     closed state is checked inline.
//
// Eligibility has one definition (Pool.Eligible; BreakerSelectable for the
// breaker), load guards one (LoadGuardTrips), the estimated time to first
// token one (CostModel: queue plus uncached prefill, the trade a
// cache-aware choice makes), and least-loaded and
// replica-consistent tie-breaks one each (LeastLoaded, LeastLoadedKeyed,
// Rendezvous). What is not here is what only the caller knows: how to key a
// request (the datapath's facts), and claiming the chosen endpoint's
// breaker slot after the pick.
//
// # Where new signals go
//
// Engine-reported load and cost estimates become Candidate fields (or Live
// pointers when they change under a Pool) filled by the datapath; the load
// guard and the least-loaded choice compare them instead of in-flight
// counts. A scored choice over several signals is a Picker that weighs them;
// no registry is needed, the rule's compiled view names its pickers.
package pick
