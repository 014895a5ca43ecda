package datapath

import (
	"time"

	"github.com/infergate/infergate/spec"
)

// silence is how long one rule lets an engine stay silent, by phase of the
// response. The daemon options set each bound; the rule's inactiveTimeOut
// (LoxiLB's connection idle timeout) caps all of them. It never stretches
// one: before this split, inactiveTimeOut's 240 s default doubled as the
// first-byte wait, and a hung engine held its client for four minutes.
type silence struct {
	firstByte  time.Duration // dispatch → response headers
	bodyStall  time.Duration // between reads of a non-SSE body
	streamIdle time.Duration // between reads of an SSE stream
}

// silenceFor resolves r's bounds from the options.
func (rt *Runtime) silenceFor(r *spec.Rule) silence {
	return silence{
		firstByte:  capBy(rt.opts.FirstByteTimeout, r.IdleTimeout),
		bodyStall:  capBy(rt.opts.BodyStallTimeout, r.IdleTimeout),
		streamIdle: capBy(rt.opts.StreamIdleTimeout, r.IdleTimeout),
	}
}

// capBy is d, or limit when limit is set and shorter.
func capBy(d, limit time.Duration) time.Duration {
	if limit > 0 && (d <= 0 || limit < d) {
		return limit
	}
	return d
}
