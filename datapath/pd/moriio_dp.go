package pd

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/infergate/infergate/spec"
)

// MoRI-IO with data parallelism, as vLLM's MoRIIOConnector runs it. An
// engine with DP size N serves ranks 0..N-1 behind one API server; every
// rank listens on its own side-channel ports, the configured base ports
// offset by (dp_rank × tp_size + tp_rank). A decode names the prefill rank
// that holds a transfer with remote_dp_rank: a READ decode reads that
// rank's blocks and notifies its port, a WRITE decode sends its block
// notice to that rank's notify port. remote_dp_size tells each side how
// many ranks the other runs: a decode handshakes with every prefill rank,
// and a WRITE prefill with every decode rank (the decode's notice names its
// own rank, so the decode needs no pinning).
//
// The prefill's API server would place a request on a rank of its own
// choosing, which a decode dispatched at the same time (concurrent WRITE)
// cannot learn, and which vLLM's connector does not report in every
// version. So the gateway picks the rank, as vLLM's MoRI-IO proxy and
// llm-d's P/D sidecar do: the prefill leg carries X-data-parallel-rank and
// the decode leg remote_dp_rank. The rank is the KV-exact tier's when it
// found one for this prefill, else the least loaded (rankload.go). The
// prefill leg carries the decode's DP size as remote_dp_size, the decode
// leg the prefill's (from the engine's handoff when sequential).
//
// All of a prefill's ranks are taken to be on its side-channel host (one
// node, as vLLM's proxy assumes); a DP deployment spread over several
// nodes is not modelled.

// moriDPSize is ep's data-parallel size: its dp_size label, else the
// rule's kvDpRankCount when above 1, else 1.
func moriDPSize(ep spec.Endpoint, rule *spec.Rule) (int, error) {
	if v, ok := ep.Labels[labelDPSize]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxCountedRank {
			return 0, fmt.Errorf("%s: %s %q is not an integer in 1..%d", ep.ID, labelDPSize, v, maxCountedRank)
		}
		return n, nil
	}
	if rule != nil && rule.KV != nil && rule.KV.DPRanks > 1 {
		return rule.KV.DPRanks, nil
	}
	return 1, nil
}

// moriRank is the DP rank a MoRI-IO prefill leg runs on (pinned when
// dp > 1) and the release of its in-flight count.
type moriRank struct {
	rank    int
	pinned  bool
	release func()
}

// moriRankFor picks prefill ep's rank for one leg (ps its settings): the
// KV-exact tier's rank when the pair's prefill is ep and the rank is one
// of its ranks, else the rank with the fewest legs in flight. The leg
// holds the rank's count until release.
func (q *seq) moriRankFor(ep spec.Endpoint, ps moriSide) moriRank {
	if ps.dp <= 1 {
		return moriRank{release: func() {}}
	}
	rank := -1
	if q.pair.HasPrefillDPRank && ep.ID == q.pair.Prefill.ID && q.pair.PrefillDPRank >= 0 && q.pair.PrefillDPRank < ps.dp {
		rank = q.pair.PrefillDPRank
	}
	load := q.rankLoad(ep.ID)
	if rank < 0 {
		rank = load.leastLoaded(ps.dp, func(i int) int { return i })
	}
	return moriRank{rank: rank, pinned: true, release: load.Hold(rank)}
}

// pin sets the rank header on a prefill leg's header when pinned.
func (r moriRank) pin(h http.Header) {
	if r.pinned {
		h.Set(headerDPRank, strconv.Itoa(r.rank))
	}
}

// moriHandoffRank completes a sequential handoff from a pinned prefill
// for its decode: the engine's remote_dp_rank when it reports one (the
// rank it ran on is its word), else the pinned rank added; either must be
// below the handoff's remote_dp_size (else the decode never handshook that
// rank and would read or notify a port no engine serves).
func moriHandoffRank(params []byte, r moriRank) ([]byte, error) {
	if !r.pinned {
		return params, nil
	}
	po, err := parseObject(params)
	if err != nil {
		return nil, handoffErr("", "is not a JSON object")
	}
	rank := int64(r.rank)
	if v, ok := po.lookup(fieldRemoteDPRank); ok && string(v) != "null" {
		rank, _ = intOrDecimal(v) // checkMoRIIOParams: a non-negative integer
	} else {
		params = po.apply([]edit{{key: fieldRemoteDPRank, value: strconv.AppendInt(nil, rank, 10)}})
	}
	if v, ok := po.lookup(fieldRemoteDPSize); ok && string(v) != "null" {
		if n, _ := intOrDecimal(v); rank >= n {
			return nil, handoffErr("."+fieldRemoteDPSize, fmt.Sprintf("%d does not include the rank the prefill ran on (%d)", n, rank))
		}
	}
	return params, nil
}
