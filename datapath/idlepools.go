package datapath

// releaseEndpointLocked closes the idle engine connections to id once no
// rule names that endpoint any more (rt.mu held, after the rule that
// dropped it is updated or removed): a deleted rule's engines must not keep
// sockets pooled until the idle reaper gets to them.
func (rt *Runtime) releaseEndpointLocked(id string) {
	for _, rs := range rt.rules {
		if _, used := rs.eps[id]; used {
			return
		}
	}
	rt.up.CloseEndpoint(id)
}
