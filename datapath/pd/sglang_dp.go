package pd

import (
	"strconv"

	"github.com/infergate/infergate/spec"
)

// SGLang engines with data-parallel attention keep one KV cache per DP
// rank. When the KV-exact tier found the prompt's blocks on one rank of
// the chosen prefill (Pair.PrefillDPRank), the prefill leg names that rank
// (data_parallel_rank: SGLang's field, which newer releases accept as the
// deprecated spelling of routed_dp_rank) so the cached prefix is reused,
// and the bootstrap room is minted congruent to the rank modulo the rule's
// kvDpRankCount: a decode locates the prefill rank that holds its KV as
// bootstrap_room % dp_size. The decode leg names no rank: its own is the
// decode engine's choice.

// fieldDataParallelRank is SGLang's per-request DP rank.
const fieldDataParallelRank = "data_parallel_rank"

// prefillRank is the DP rank to send prefill's leg to, when known: only
// for the pair's own prefill (an alternate's cache was not scored) and
// only when the rule's engines have more than one rank.
func (q sgSeq) prefillRank(prefill spec.Endpoint) (rank, ranks int, ok bool) {
	r := q.req.Rule
	if !q.pair.HasPrefillDPRank || prefill.ID != q.pair.Prefill.ID || r == nil || r.KV == nil || r.KV.DPRanks < 2 {
		return 0, 0, false
	}
	if q.pair.PrefillDPRank < 0 || q.pair.PrefillDPRank >= r.KV.DPRanks {
		return 0, 0, false
	}
	return q.pair.PrefillDPRank, r.KV.DPRanks, true
}

// alignRoom returns a room near room with room % ranks == rank. The room
// keeps 55 random bits, plenty to stay unique across replicas.
func alignRoom(room uint64, rank, ranks int) uint64 {
	room >>= 8
	return room - room%uint64(ranks) + uint64(rank)
}

// legBodies are one dispatch's prefill and decode bodies: the bootstrap
// triple on both, and on the prefill leg its DP rank when known. The
// decode body (also the prefill's without a rank) is written into buf's
// memory when it fits.
func (q sgSeq) legBodies(buf []byte, prefill spec.Endpoint) (pbody, dbody []byte) {
	room := randUint63()
	rank, ranks, ok := q.prefillRank(prefill)
	if ok {
		room = alignRoom(room, rank, ranks)
	}
	host, port := prefill.Addr.Addr().String(), q.bootstrapPort(prefill)
	dbody = sglangBodyInto(buf, &q.obj, host, port, room)
	if !ok {
		return dbody, dbody
	}
	var rb [24]byte
	return sglangBody(&q.obj, host, port, room, edit{fieldDataParallelRank, strconv.AppendInt(rb[:0], int64(rank), 10)}), dbody
}
