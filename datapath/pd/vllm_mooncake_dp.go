package pd

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/infergate/infergate/spec"
)

// A vLLM prefill with data parallelism runs one engine per DP rank, each
// with its own KV engine id (vLLM suffixes the configured id with _dp<rank>)
// and workers, all registered with the one Mooncake bootstrap server, whose
// GET /query lists them by rank. A Mooncake decode asks /query and pulls
// from the workers of the engine its remote_engine_id names. Left alone,
// the prefill's API server spreads requests over its ranks itself, so the
// gateway could not know which engine holds a transfer. It therefore picks
// the rank: the prefill leg is pinned to it with vLLM's X-data-parallel-rank
// header, and the decode leg names that rank's engine id.
//
// The rank is the one the KV-exact tier found holding the prompt's blocks
// (Pair.PrefillDPRank) when the bootstrap server lists it; otherwise the
// listed rank with the fewest of the gateway's prefill legs in flight
// (rankload.go).

// headerDPRank is vLLM's per-request data-parallel rank header.
const headerDPRank = "X-data-parallel-rank"

// maxDPRank bounds a rank key taken from /query.
const maxDPRank = 1 << 16

// MooncakeRank is one DP rank's engine as a bootstrap /query lists it.
type MooncakeRank struct {
	Rank     int
	EngineID string
}

// MooncakeRanks are a prefill's engines, ascending by rank. Read-only once
// built.
type MooncakeRanks []MooncakeRank

// EngineRankSource is an EngineIDSource that also knows each Mooncake
// prefill's engines per DP rank (the datapath's does; Request.EngineIDs
// is asserted to it).
type EngineRankSource interface {
	// KVEngineRanks are the engines the endpoint with ID id listed on its
	// bootstrap /query (nil: not read).
	KVEngineRanks(id string) MooncakeRanks
}

// ParseMooncakeRanks is every rank of a /query body; ok is false when it
// lists none, a rank key is not a decimal in 0..65535, or any engine id is
// unusable (validEngineID): a decode would send it back verbatim.
func ParseMooncakeRanks(body []byte) (MooncakeRanks, bool) {
	var m map[string]struct {
		EngineID string `json:"engine_id"`
	}
	if json.Unmarshal(body, &m) != nil || len(m) == 0 {
		return nil, false
	}
	out := make(MooncakeRanks, 0, len(m))
	for k, v := range m {
		r, err := strconv.Atoi(k)
		if err != nil || r < 0 || r >= maxDPRank || strconv.Itoa(r) != k || !validEngineID(v.EngineID) {
			return nil, false
		}
		out = append(out, MooncakeRank{Rank: r, EngineID: v.EngineID})
	}
	slices.SortFunc(out, func(a, b MooncakeRank) int { return a.Rank - b.Rank })
	return out, true
}

// validEngineID: non-empty, at most maxEngineIDLen bytes, no whitespace
// or control bytes.
func validEngineID(id string) bool {
	if id == "" || len(id) > maxEngineIDLen {
		return false
	}
	for _, c := range []byte(id) {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// mooncakeTarget is the engine of a prefill a Mooncake transfer names.
type mooncakeTarget struct {
	id     string // KV engine id ("": unknown, no transfer possible)
	rank   int
	pinned bool // several DP ranks: the leg carries X-data-parallel-rank
}

// mooncakeTargetFor is prefill ep's engine for one transfer: with several
// ranks listed on its bootstrap server, the KV-exact rank (has, rank) when
// listed, else the least loaded listed one, pinned; with a declared dp_size > 1
// but no ranks read yet, unknown; else the single engine
// (mooncakeEngineID: label, else the learned rank-0 id).
func (q *seq) mooncakeTargetFor(ep spec.Endpoint, rank int, has bool) mooncakeTarget {
	var ranks MooncakeRanks
	if src, ok := q.req.EngineIDs.(EngineRankSource); ok {
		ranks = src.KVEngineRanks(ep.ID)
	}
	if len(ranks) > 1 {
		i := slices.IndexFunc(ranks, func(r MooncakeRank) bool { return r.Rank == rank })
		if !has || i < 0 {
			i = q.rankLoad(ep.ID).leastLoaded(len(ranks), func(i int) int { return ranks[i].Rank })
		}
		return mooncakeTarget{id: ranks[i].EngineID, rank: ranks[i].Rank, pinned: true}
	}
	if labelledDPSize(ep) > 1 {
		return mooncakeTarget{}
	}
	return mooncakeTarget{id: q.mooncakeEngineID(ep)}
}

// labelledDPSize is ep's dp_size label (1 when absent or not a number).
func labelledDPSize(ep spec.Endpoint) int {
	if n, err := strconv.Atoi(ep.Labels[labelDPSize]); err == nil && n > 0 {
		return n
	}
	return 1
}
