package datapath

import "github.com/infergate/infergate/datapath/pd"

// KVEngineRanks are the engines per DP rank the endpoint with ID id listed
// on its Mooncake bootstrap /query (nil: not read, or a rank was
// unusable); the vLLM dialect pins a multi-rank prefill's leg to one of
// them (pd.EngineRankSource).
func (c *compiled) KVEngineRanks(id string) pd.MooncakeRanks {
	for _, ep := range c.eps {
		if ep.id == id {
			if p := ep.kvEngineRanks.Load(); p != nil {
				return *p
			}
			return nil
		}
	}
	return nil
}

var _ pd.EngineRankSource = (*compiled)(nil)
