package datapath

import "github.com/infergate/infergate/datapath/pd"

// RankLoad is the per-DP-rank count of prefill legs in flight on the
// endpoint with ID id (nil: no such endpoint), kept on the endpoint so it
// survives rule updates; the vLLM dialect sends an unpreferred pinned leg
// to the least loaded rank (pd.RankLoadSource).
func (c *compiled) RankLoad(id string) *pd.RankLoad {
	if i := c.indexOf(id); i >= 0 {
		return &c.eps[i].ranks
	}
	return nil
}

var _ pd.RankLoadSource = (*compiled)(nil)
