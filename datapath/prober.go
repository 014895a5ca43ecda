package datapath

// Why probers start and stop with the rule's probe setting: a prober is two
// goroutines and a ticker per rule, waking every probe interval. A rule
// without probes (probetype none, the common case for engines behind their
// own health checks) has nothing for them to do, and with thousands of
// rules they were thousands of goroutines and timer wake-ups for nothing. A
// prober therefore runs only while the rule's current generation probes: an
// update that turns probes on starts one, and a prober that finds its
// generation probe-less stops.

// noProber is a rule's proberDone while no prober runs: already closed, so
// Close never waits for it.
func noProber() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// startProberLocked starts rs's prober if its current generation probes
// and none runs (rt.mu held).
func (rt *Runtime) startProberLocked(rs *ruleState) {
	if rs.probing || probeDisabled(rs.cur.Load().rule.Probe) {
		return
	}
	rs.probing = true
	done := make(chan struct{})
	rs.proberDone = done
	go rt.runProber(rs, done)
}

// proberIdle reports whether rs's prober may stop: its current generation
// does not probe. Decided under rt.mu, where generations are swapped and
// startProberLocked runs, so an update that turns probes back on either
// sees this prober still running (and kicks it) or starts a new one.
func (rt *Runtime) proberIdle(rs *ruleState) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !probeDisabled(rs.cur.Load().rule.Probe) {
		return false
	}
	rs.probing = false
	return true
}
