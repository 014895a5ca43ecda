package pd

import (
	"context"
	"errors"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/datapath/pd/bufpool"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// seq is one request's run through a dialect: what every step of the
// sequence needs, fixed when Serve starts, so a step takes only what
// differs between its calls (the leg, the endpoint, the attempt). A
// fanned-out SGLang request runs one copy per unit, each with its own ctx,
// writer, outcome and body.
type seq struct {
	ctx  context.Context
	w    http.ResponseWriter
	req  *Request
	pair Pair
	s    upstream.Sender
	opts Options
	o    *Outcome
	log  logrus.FieldLogger
	obj  object      // the client body, parsed once (clientObject)
	head http.Header // the legs' header, for dialects that share one
	// bodies recycles leg-body buffers (nil: the dialect does not).
	bodies *bufpool.Pool
}

// serve is every dialect's Serve: it times the request, parses the client
// body (refusing what no engine can take) and runs the engine's sequence
// on q.
func serve(q *seq, engine spec.Engine, run func(q *seq)) Outcome {
	start := time.Now()
	o := Outcome{Engine: engine}
	q.o = &o
	q.log = q.opts.Log.WithFields(logFields(engine, q.req))
	if q.clientObject() {
		run(q)
	}
	o.Total = time.Since(start)
	return o
}

// fail answers an error infergate generates and records it in the outcome.
func (q *seq) fail(phase Phase, status int, code, msg string) {
	writeError(q.w, q.o, phase, status, code, msg)
}

// sharedHeader is legHeader with the datapath's request id: the one header
// of every leg of dialects whose legs need no id of their own.
func (q *seq) sharedHeader() http.Header {
	h := legHeader(q.req.Header)
	if q.req.RequestID != "" {
		h.Set(headerRequestID, q.req.RequestID)
	}
	return h
}

// Helpers shared by the sequential dialects (vLLM, TensorRT-LLM): a buffered
// prefill/context leg, then a relayed decode/generation leg.

// prefillResult is a fully buffered prefill response or its failure.
type prefillResult struct {
	leg      LegResult
	header   http.Header
	body     []byte
	overflow bool // response exceeded MaxPrefillResponse
}

// sendPrefill sends a prefill leg under its own timeout and buffers the
// reply: its bytes are never relayed except on a 4xx or an early exit.
func (q *seq) sendPrefill(leg upstream.Leg) prefillResult {
	pctx, cancel := context.WithTimeout(q.ctx, q.opts.PrefillTimeout)
	defer cancel()
	start := time.Now()
	var r prefillResult
	resp, err := q.s.Send(pctx, leg)
	status := 0
	if err == nil {
		status = resp.StatusCode
		r.header = resp.Header
		r.body, err = readCapped(resp.Body, q.opts.MaxPrefillResponse)
		resp.Body.Close()
		if errors.Is(err, errTooLarge) {
			// The engine answered but too much: not a transport death.
			r.overflow, err = true, nil
		}
	}
	r.leg = legFor(PhasePrefill, leg.Endpoint, status, err, time.Since(start))
	if err != nil {
		switch {
		case q.ctx.Err() != nil:
			r.leg.Cancelled, r.leg.Died, r.leg.PoolWait = true, false, false
		case r.leg.PoolWait: // the bound passed while it waited for a connection
		case errors.Is(pctx.Err(), context.DeadlineExceeded):
			r.leg.TimedOut, r.leg.Died = true, false
		}
	}
	return r
}

// prefillWords names the first leg in logs and errors: "prefill" for vLLM,
// "context" for TensorRT-LLM.
type prefillWords struct {
	leg      string // "prefill" / "context"
	fallback string // what happens without transfer params, for the log
}

// prefillWithFailover runs the sequential dialects' first leg with their
// shared failure rules: a cancel or timeout ends the request, a 4xx is
// relayed (the second leg would fail the same way), an engine failure is
// retried once on the first alternate prefill (shouldRetryPrefill), and any
// other failure leaves the second leg to run without transfer state
// (KVTransferFailed). build makes the leg for a given prefill, so a dialect
// can mint fresh per-dispatch ids. done means the client has been answered;
// otherwise ok reports a usable (non-failed) response in r.
func (q *seq) prefillWithFailover(build func(prefill spec.Endpoint) upstream.Leg, words prefillWords) (r prefillResult, prefill spec.Endpoint, ok, done bool) {
	o := q.o
	prefill = q.pair.Prefill
	for attempt := 0; ; attempt++ {
		r = q.sendPrefill(build(prefill))
		o.leg(r.leg)
		o.Prefill = r.leg.Duration
		switch {
		case q.prefillEnded(r, words.leg):
			return r, prefill, false, true
		case r.overflow:
			o.KVTransferFailed = true
			return r, prefill, false, false
		case !shouldRetryPrefill(r.leg):
			return r, prefill, true, false
		case attempt == 0 && len(q.pair.AltPrefill) > 0:
			q.log.WithFields(logrus.Fields{"endpoint": prefill.ID, "status": r.leg.Status, "error": r.leg.Err}).
				Warn("pd: " + words.leg + " failed, retrying on another " + words.leg)
			prefill = q.pair.AltPrefill[0]
			o.PrefillFailover = true
		default:
			q.log.WithFields(logrus.Fields{"endpoint": prefill.ID, "status": r.leg.Status, "error": r.leg.Err}).
				Warn("pd: " + words.leg + " failed, " + words.fallback)
			o.KVTransferFailed = true
			return r, prefill, false, false
		}
	}
}

// prefillEnded answers the client when prefill result r ends the request
// whatever the sequence (sequential with failover, or MoRI-IO's concurrent
// WRITE): the client left (nothing to answer), the connection pool's wait
// bound passed, the leg (named leg in the message) timed out (504: the
// engine may still be working, so it is not retried), or the engine
// refused the request with a 4xx, relayed with its status because the
// decode would refuse it too. A 4xx whose body is over MaxPrefillResponse
// is still the engine's verdict on the client's request: its status is
// relayed with an empty body, never turned into a gateway error. true:
// the client has been answered.
func (q *seq) prefillEnded(r prefillResult, leg string) bool {
	o, l := q.o, r.leg
	switch {
	case l.Cancelled:
		clientGone(o, PhasePrefill)
	case l.PoolWait:
		q.failPoolWait(PhasePrefill)
	case l.TimedOut:
		q.fail(PhasePrefill, http.StatusGatewayTimeout, CodePrefillTimeout, leg+" did not complete in time")
	case l.Err == nil && l.Status >= 400 && l.Status < 500:
		writeBuffered(q.w, l.Status, r.header, r.body)
		o.Status, o.Relayed, o.FailedPhase = l.Status, true, PhasePrefill
	default:
		return false
	}
	return true
}

// shouldRetryPrefill is the retry rule for a sequential prefill leg: retry
// once, on another prefill, when the engine failed (5xx, or the connection
// failed or died) — never on a 4xx (the request itself is bad and would fail
// the same way), a timeout (the engine may still be working) or a cancel.
func shouldRetryPrefill(l LegResult) bool {
	if l.Cancelled || l.TimedOut {
		return false
	}
	if l.Err != nil {
		return true
	}
	return l.Status < 200 || l.Status >= 500 || (l.Status >= 300 && l.Status < 400)
}

// shouldRetryDecode is the retry rule for a decode leg: retry on the next
// decode only when the engine provably never got the request (a connect
// failure, NotSent) and another decode is left — never after a timeout, a
// cancel or anything that may have reached the engine. The prefill's result
// (its KV blocks and transfer params) stays valid for any decode.
func shouldRetryDecode(l LegResult, haveAlt bool) bool {
	return haveAlt && l.NotSent && !l.TimedOut && !l.Cancelled
}

// serveDecode sends the decode leg built for the pair's decode and relays
// its response; a connect failure moves on to the next decode
// (shouldRetryDecode). The decode first byte must arrive within
// DecodeTimeout, per attempt.
func (q *seq) serveDecode(build func(decode spec.Endpoint) upstream.Leg) {
	decodes := q.pair.decodes()
	for k, d := range decodes {
		if !q.decodeOnce(build(d), k+1 < len(decodes)) {
			return
		}
		q.o.DecodeFailover = true
		q.log.WithFields(logrus.Fields{"endpoint": d.ID, "next": decodes[k+1].ID}).Warn("pd: decode unreachable, retrying on another decode")
	}
}

// decodeOnce runs one decode attempt. retry: the connection failed before
// the engine got the request and haveAlt allows another decode; nothing
// was written to the client.
func (q *seq) decodeOnce(leg upstream.Leg, haveAlt bool) (retry bool) {
	return q.answerDecode(q.peekDecode(q.ctx, leg), haveAlt)
}

// decodePeek is a decode leg sent and read up to its first body byte
// (peekDecode), not yet answered to the client (answerDecode).
type decodePeek struct {
	leg      upstream.Leg
	p        peek
	buf      []byte
	timedOut *atomic.Bool // DecodeTimeout passed before the first byte
	cancel   context.CancelFunc
}

// peekDecode sends a decode leg under ctx (q.ctx, or a context the caller
// may cancel to drop the leg) and waits for its first body byte, at most
// DecodeTimeout. The leg stays open until answerDecode or cancel.
func (q *seq) peekDecode(ctx context.Context, leg upstream.Leg) decodePeek {
	return q.peekDecodeArmed(ctx, leg, nil)
}

// peekDecodeArmed is peekDecode whose DecodeTimeout starts when armed is
// closed (nil: at dispatch). A decode dispatched before its prefill
// answered (MoRI-IO's concurrent WRITE) cannot send a first byte before
// the prefill's push, so its bound starts when the prefill's handoff has
// passed; until then the prefill's own timeout bounds the request.
func (q *seq) peekDecodeArmed(ctx context.Context, leg upstream.Leg, armed <-chan struct{}) decodePeek {
	dctx, cancel := context.WithCancel(ctx)
	timedOut := new(atomic.Bool)
	expire := func() { timedOut.Store(true); cancel() }
	var t *time.Timer
	var mu sync.Mutex // orders the arming with the stop below
	stopped := false
	if armed == nil {
		t = time.AfterFunc(q.opts.DecodeTimeout, expire)
	} else {
		t = time.AfterFunc(time.Duration(math.MaxInt64), expire) // not before armed
		go func() {
			select {
			case <-armed:
				mu.Lock()
				if !stopped {
					t.Reset(q.opts.DecodeTimeout)
				}
				mu.Unlock()
			case <-dctx.Done():
			}
		}()
	}
	buf := make([]byte, 32<<10)
	p := sendAndPeek(dctx, q.s, leg, buf)
	mu.Lock()
	stopped = true
	fired := !t.Stop()
	mu.Unlock()
	if fired && p.err == nil {
		p.resp.Body.Close()
		p.err = context.DeadlineExceeded
	}
	return decodePeek{leg: leg, p: p, buf: buf, timedOut: timedOut, cancel: cancel}
}

// answerDecode answers the client from a peeked decode leg: its failure
// mapped to a code, or its response relayed. retry as for decodeOnce.
func (q *seq) answerDecode(d decodePeek, haveAlt bool) (retry bool) {
	o, leg, p, buf, cancel, timedOut := q.o, d.leg, d.p, d.buf, d.cancel, d.timedOut
	defer cancel()
	o.DecodeTTFB = p.ttfb
	status := 0
	if p.resp != nil && p.err == nil {
		status = p.resp.StatusCode
	}
	lr := legFor(PhaseDecode, leg.Endpoint, status, p.err, p.ttfb)
	if p.err != nil {
		switch {
		case q.ctx.Err() != nil:
			lr.Cancelled, lr.Died, lr.PoolWait = true, false, false
			clientGone(o, PhaseDecode)
		case lr.PoolWait: // the bound passed while it waited for a connection
			o.DecodeTTFB = 0 // no engine was timed
			q.failPoolWait(PhaseDecode)
		case timedOut.Load():
			lr.TimedOut, lr.Died = true, false
			q.fail(PhaseDecode, http.StatusGatewayTimeout, CodeDecodeTimeout, "decode endpoint sent no response in time")
		case shouldRetryDecode(lr, haveAlt):
			o.leg(lr)
			return true
		case lr.NotSent && q.pair.Unsplit:
			o.DecodeUnreachable, o.FailedPhase = true, PhaseDecode
		case lr.NotSent:
			q.fail(PhaseDecode, http.StatusServiceUnavailable, CodePoolUnavailable, "decode endpoint unreachable")
		default:
			q.fail(PhaseDecode, http.StatusBadGateway, CodeDecodeDied, "decode backend closed before any response bytes")
		}
		q.log.WithFields(logrus.Fields{"endpoint": leg.Endpoint.ID, "code": o.Code, "error": p.err}).Warn("pd: decode leg failed")
		o.leg(lr)
		return false
	}
	o.Status = status
	o.Relayed = status >= 400
	rr := q.relay(p, buf, cancel)
	q.endRelay(&lr, rr)
	o.leg(lr)
	return false
}

// endRelay records how a decode relay ended on its leg and the outcome.
func (q *seq) endRelay(lr *LegResult, rr relayResult) {
	if rr.cut {
		lr.Died, lr.Err = true, errors.New("decode connection died mid-response")
		q.o.StreamCut = true
	}
	q.o.IdleTimeout = rr.idle
	if rr.clientGone {
		lr.Cancelled = true
		q.o.ClientGone, q.o.Code, q.o.FailedPhase = true, CodeClientGone, PhaseDecode
	}
}
