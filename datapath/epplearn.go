package datapath

import (
	"time"

	"github.com/infergate/infergate/epp"
)

// Cost-model learning on the endpoint-picker path. A proxied request tells
// the cost model when its first token arrived (Placed.FirstToken on a
// streamed answer, else Placed.Done at the first byte), which releases the
// prefill it booked on its endpoint and teaches that endpoint's costs. A
// picked request is forwarded by the gateway in front; the EPP sees its
// response only through ext_proc, and the first response body chunk the
// proxy passes on is the nearest it has to a first token. FirstChunk
// (epp.Progress) settles the booking then; Served settles any booking left
// (no body came: an error, a cancelled stream, a proxy that sends no
// response body).
//
// What cannot be learned honestly is not: a body that is not an event
// stream arrives with its last token; a buffered body mode, or a lone
// closing chunk, arrives at the end; an answer from another endpoint than
// the one the cost model priced teaches the wrong endpoint; and a P/D
// pair's first chunk comes after the sidecar's prefill, the KV transfer and
// the decode's first token, where the proxy learns from the prefill leg's
// own time, which the EPP never sees. Those release the booking only.

var _ epp.Progress = (*EPPPicker)(nil)

// FirstChunk is the epp.Progress hook: the pick's first response body
// chunk reached the EPP.
func (p *EPPPicker) FirstChunk(o epp.Outcome) {
	t, ok := o.Result.State.(*eppTicket)
	if !ok || t.placed == nil {
		return
	}
	if t.teachesFirstToken(o) {
		t.placed.FirstToken(time.Now())
	} else {
		t.placed.Done(0) // its prefill is over by now
	}
}

// teachesFirstToken is the rule for learning from a pick's first response
// body chunk: it must be a single-pool pick the cost model placed, a 2xx
// event stream passed on chunk by chunk (epp.Outcome.Incremental), served
// by the endpoint that was priced (or by an endpoint the proxy did not
// name, as Served assumes).
func (t *eppTicket) teachesFirstToken(o epp.Outcome) bool {
	return t.placed != nil && t.prefill < 0 &&
		o.Status >= 200 && o.Status < 300 && o.EventStream && o.Incremental &&
		(o.Endpoint == "" || o.Endpoint == t.c.eppAddr(t.primary))
}
