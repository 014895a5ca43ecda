package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// routeReadyzPD is the daemon-level P/D readiness probe.
const routeReadyzPD = "/readyz/pd"

// PDReadinessView is GET /readyz/pd.
type PDReadinessView struct {
	Status string `json:"status"` // "ready" or "not ready"
	// PDRules is how many prefill/decode rules are configured (admin-down
	// rules excluded); Unpaired how many of them have no usable,
	// compatible prefill/decode pair now.
	PDRules  int `json:"pd_rules"`
	Unpaired int `json:"unpaired"`
}

// readyzPD answers 200 when every P/D rule has a usable prefill/decode
// pair that may pair (the rule's /status ready), else 503: a load balancer
// probing it takes a daemon out of rotation whose P/D rules would answer
// 503 pd_pool_unavailable or no_compatible_pd_pair. Like /readyz it is
// anonymous, so it names no rule; …/status says which and why. A rule with
// adminStateUp false is deliberately not serving and is not counted.
func (s *Server) readyzPD(c *gin.Context) {
	if !s.booted() {
		writeError(c, s.log, notReady())
		return
	}
	var v PDReadinessView
	for _, e := range s.store.List() {
		if e.Compiled == nil || e.Compiled.PD == nil || e.Compiled.AdminDown {
			continue
		}
		v.PDRules++
		if st, ok := s.runtimeStatus(e); !ok || !st.Ready {
			v.Unpaired++
		}
	}
	if v.Unpaired > 0 {
		v.Status = "not ready"
		c.JSON(http.StatusServiceUnavailable, v)
		return
	}
	v.Status = "ready"
	c.JSON(http.StatusOK, v)
}
