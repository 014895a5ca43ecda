package pd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sirupsen/logrus"
)

// Concurrent WRITE dispatch. In WRITE mode vLLM's MoRIIOConnector decode,
// told the prefill's side channel and the transfer id, allocates blocks
// for the prompt and notifies the prefill (remote_host, remote_notify_port
// offset by the rank); the prefill writes each layer's KV into those
// blocks as its forward pass runs, then tells the decode the write is
// done. vllm-router sends both legs at once for WRITE pairs (its toy proxy
// awaits the prefill only in READ mode), and SMG offers the same as an
// opt-in (moriio_write_dispatch: concurrent on the decode): the push then
// overlaps the prefill instead of starting after its answer.
//
// The MoRI-IO rule still holds: nothing the decode says reaches the client
// unless the prefill answered with a checked handoff for this transfer
// naming the side-channel ports the decode was told. The decode's answer,
// even one that has already arrived, is held until then. The first leg to
// fail ends the request and the other is dropped (its engine aborts it).
// There is no failover: the decode was told this prefill's side channel,
// the prefill this decode's.

// moriConcurrentDecodeParams are a concurrent WRITE decode leg's
// kv_transfer_params, minted before the prefill answers: claim transfer
// tid from the prefill whose side channel is ps (its DP size, its TP when
// labelled), on rank r when pinned (moriio_dp.go).
func moriConcurrentDecodeParams(tid string, ps moriSide, r moriRank) []byte {
	v := moriParamsTo(tid, ps, true)
	v.DoRemotePrefill = true
	if r.pinned {
		v.RemoteDPRank = &r.rank
	}
	b, _ := json.Marshal(v)
	return b
}

// moriConcurrentHandoff checks a concurrent prefill's answer: the MoRI-IO
// handoff rule (moriHandoff), and the handshake and notify ports it
// reports are the ones the decode was told (ps, from the prefill's
// labels), and so is its remote_dp_rank when it reports one (r):
// otherwise the decode notified a side channel the engine does not listen
// on and waits for a push that never comes. remote_host is not compared
// (a name or another interface of the same engine is fine).
func moriConcurrentHandoff(body []byte, tid string, ps moriSide, r moriRank) error {
	params, err := moriHandoff(body, tid)
	if err != nil {
		return err
	}
	po, err := parseObject(params)
	if err != nil {
		return handoffErr("", "is not a JSON object")
	}
	for _, c := range []struct {
		field string
		told  int
	}{{fieldRemoteHandshakePort, ps.handshake}, {fieldRemoteNotifyPort, ps.notify}} {
		v, _ := po.lookup(c.field)
		if n, _ := intOrDecimal(v); n != int64(c.told) {
			return handoffErr("."+c.field, fmt.Sprintf("is not the port the decode was told (%d, the prefill's label)", c.told))
		}
	}
	if v, ok := po.lookup(fieldRemoteDPRank); ok && string(v) != "null" && r.pinned {
		if n, _ := intOrDecimal(v); n != int64(r.rank) {
			return handoffErr("."+fieldRemoteDPRank, fmt.Sprintf("is not the rank the decode was told (%d)", r.rank))
		}
	}
	return nil
}

// runMoRIIOConcurrent is the concurrent WRITE sequence for a pair moriPair
// accepted: the prefill leg (as sequential WRITE: the decode's side
// channel) and the decode leg (the prefill's side channel, minted params)
// are dispatched at once under one request id; the decode is answered
// only after the prefill's handoff passed.
func runMoRIIOConcurrent(q *seq, ps, ds moriSide, suffix string) {
	o := q.o
	tid := newTransferID()
	rank := q.moriRankFor(q.pair.Prefill, ps) // moriio_dp.go
	defer rank.release()
	pleg := q.moriPrefillLeg(q.pair.Prefill, suffix, tid, ds)
	rank.pin(pleg.Header)
	dleg := q.vllmLeg(q.pair.Decode, suffix, vllmDecodeBody(&q.obj, moriConcurrentDecodeParams(tid, ps, rank)))

	pctx, dropPrefill := context.WithCancel(q.ctx)
	defer dropPrefill()
	dctx, dropDecode := context.WithCancel(q.ctx)
	defer dropDecode()
	prefCh := make(chan prefillResult, 1)
	decCh := make(chan decodePeek, 1)
	pq := *q
	pq.ctx = pctx // sendPrefill reports a dropped leg as Cancelled
	// The decode's first-byte bound starts once the prefill's handoff
	// passed, as a sequential decode's starts at its dispatch.
	armed := make(chan struct{})
	go func() { prefCh <- pq.sendPrefill(pleg) }()
	go func() { decCh <- q.peekDecodeArmed(dctx, dleg, armed) }()

	var held *decodePeek // a decode answer waiting for the prefill's handoff
	var r prefillResult
	for waiting := true; waiting; {
		select {
		case r = <-prefCh:
			waiting = false
		case d := <-decCh:
			if d.p.err == nil && d.p.resp.StatusCode >= 200 && d.p.resp.StatusCode < 300 {
				held = &d
				continue
			}
			// The decode failed first, or refused the request (it takes
			// no push): the prefill's work is moot.
			dropPrefill()
			pr := <-prefCh
			o.leg(pr.leg)
			o.Prefill = pr.leg.Duration
			q.answerDecode(d, false)
			return
		}
	}
	o.leg(r.leg)
	o.Prefill = r.leg.Duration
	rank.release() // the prefill leg is over
	if !q.moriConcurrentPrefill(r, tid, ps, rank) {
		dropDecode()
		if held == nil {
			d := <-decCh
			held = &d
		}
		q.dropDecodeLeg(*held)
		return
	}
	close(armed)
	if held == nil {
		d := <-decCh
		held = &d
	}
	q.answerDecode(*held, false)
}

// moriConcurrentPrefill judges a concurrent prefill's result; false: the
// request failed and the client has been answered (the caller drops the
// decode). What ends any prefill (prefillEnded: the client leaving, the
// pool wait, a timeout, a 4xx relayed) is judged as in the sequential
// sequence; then a response over the size cap or a handoff that fails
// the check is 502 moriio_handoff_invalid, a 5xx is relayed, and a
// transport failure or another status 502 pd_prefill_failed.
func (q *seq) moriConcurrentPrefill(r prefillResult, tid string, ps moriSide, rank moriRank) bool {
	o, l := q.o, r.leg
	fail := func(err error) bool {
		q.log.WithFields(logrus.Fields{"endpoint": l.Endpoint.ID, "status": l.Status, "error": err}).
			Warn("pd: MoRI-IO prefill failed; the concurrent decode leg was dropped")
		return false
	}
	switch {
	case q.prefillEnded(r, "prefill"):
		if l.Cancelled {
			return false
		}
		return fail(l.Err)
	case r.overflow:
		q.refuseHandoff(l.Endpoint.ID, CodeMoRIIOHandoffInvalid, handoffErr("", "unreadable: the prefill response is over the size cap"), "the decode leg in flight was dropped")
		return false
	case l.Err != nil:
		q.fail(PhasePrefill, http.StatusBadGateway, CodePrefillFailed,
			"prefill failed; the MoRI-IO decode waiting for its push was dropped")
		return fail(l.Err)
	case l.Status >= 500:
		writeBuffered(q.w, l.Status, r.header, r.body)
		o.Status, o.Relayed, o.FailedPhase = l.Status, true, PhasePrefill
		return fail(nil)
	case l.Status < 200 || l.Status >= 300:
		q.fail(PhasePrefill, http.StatusBadGateway, CodePrefillFailed,
			"prefill failed; the MoRI-IO decode waiting for its push was dropped")
		return fail(nil)
	}
	if err := moriConcurrentHandoff(r.body, tid, ps, rank); err != nil {
		q.refuseHandoff(l.Endpoint.ID, CodeMoRIIOHandoffInvalid, err, "the decode leg in flight was dropped")
		return false
	}
	return true
}

// dropDecodeLeg closes a decode leg the gateway dropped (its context is
// already cancelled) and records it as cancelled: the gateway's doing, not
// the engine's.
func (q *seq) dropDecodeLeg(d decodePeek) {
	d.cancel()
	status := 0
	if d.p.err == nil {
		status = d.p.resp.StatusCode
		d.p.resp.Body.Close()
	}
	lr := legFor(PhaseDecode, d.leg.Endpoint, status, d.p.err, d.p.ttfb)
	if !lr.PoolWait {
		lr.Cancelled, lr.Died, lr.NotSent = true, false, false
	}
	q.o.leg(lr)
}
