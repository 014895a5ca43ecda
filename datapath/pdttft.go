package datapath

// observeClientTTFT records infergate_pd_client_ttft_seconds for a P/D
// answer: when its first body byte reached the client (the request's
// clock, observe.go) — the wait a client sees (queueing, prefill, KV
// transfer, decode's first token and every retry in between), which the
// per-leg histograms only add up to when nothing went wrong. Errors and
// empty answers have no first token.
func (rt *Runtime) observeClientTTFT(c *compiled, model string, x *exchange) {
	clk := &x.obs.clock
	first, status := clk.First(), clk.Status()
	if first.IsZero() || status < 200 || status >= 300 || rt.pdm == nil || rt.pdm.ClientTTFT == nil {
		return
	}
	rt.pdm.ClientTTFT.WithLabelValues(c.label, model).Observe(first.Sub(x.start).Seconds())
}
