package pd

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// Helpers shared by the sequential dialects (vLLM, TensorRT-LLM): a buffered
// prefill/context leg, then a relayed decode/generation leg.

// prefillResult is a fully buffered prefill response or its failure.
type prefillResult struct {
	leg      LegResult
	header   http.Header
	body     []byte
	overflow bool // response exceeded MaxPrefillResponse
}

// runPrefill sends a prefill leg under its own timeout and buffers the reply:
// its bytes are never relayed except on a 4xx or an early exit.
func runPrefill(ctx context.Context, s upstream.Sender, leg upstream.Leg, opts Options) prefillResult {
	pctx, cancel := context.WithTimeout(ctx, opts.PrefillTimeout)
	defer cancel()
	start := time.Now()
	var r prefillResult
	resp, err := s.Send(pctx, leg)
	status := 0
	if err == nil {
		status = resp.StatusCode
		r.header = resp.Header
		r.body, err = readCapped(resp.Body, opts.MaxPrefillResponse)
		resp.Body.Close()
		if errors.Is(err, errTooLarge) {
			// The engine answered but too much: not a transport death.
			r.overflow, err = true, nil
		}
	}
	r.leg = legFor(PhasePrefill, leg.Endpoint, status, err, time.Since(start))
	if err != nil {
		switch {
		case ctx.Err() != nil:
			r.leg.Cancelled, r.leg.Died = true, false
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
func prefillWithFailover(ctx context.Context, w http.ResponseWriter, s upstream.Sender, pair Pair, build func(prefill spec.Endpoint) upstream.Leg,
	opts Options, o *Outcome, log logrus.FieldLogger, words prefillWords) (r prefillResult, prefill spec.Endpoint, ok, done bool) {
	prefill = pair.Prefill
	for attempt := 0; ; attempt++ {
		r = runPrefill(ctx, s, build(prefill), opts)
		o.leg(r.leg)
		o.Prefill = r.leg.Duration
		switch {
		case r.leg.Cancelled:
			clientGone(o, PhasePrefill)
			return r, prefill, false, true
		case r.leg.TimedOut:
			writeError(w, o, PhasePrefill, http.StatusGatewayTimeout, CodePrefillTimeout, words.leg+" did not complete in time")
			return r, prefill, false, true
		case r.leg.Err == nil && r.leg.Status >= 400 && r.leg.Status < 500:
			writeBuffered(w, r.leg.Status, r.header, r.body)
			o.Status, o.Relayed, o.FailedPhase = r.leg.Status, true, PhasePrefill
			return r, prefill, false, true
		case r.overflow:
			o.KVTransferFailed = true
			return r, prefill, false, false
		case !shouldRetryPrefill(r.leg):
			return r, prefill, true, false
		case attempt == 0 && len(pair.AltPrefill) > 0:
			log.WithFields(logrus.Fields{"endpoint": prefill.ID, "status": r.leg.Status, "error": r.leg.Err}).
				Warn("pd: " + words.leg + " failed, retrying on another " + words.leg)
			prefill = pair.AltPrefill[0]
			o.PrefillFailover = true
		default:
			log.WithFields(logrus.Fields{"endpoint": prefill.ID, "status": r.leg.Status, "error": r.leg.Err}).
				Warn("pd: " + words.leg + " failed, " + words.fallback)
			o.KVTransferFailed = true
			return r, prefill, false, false
		}
	}
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

// serveDecode sends the decode leg built for decodes[0] and relays its
// response; a connect failure moves on to the next decode
// (shouldRetryDecode). The decode first byte must arrive within
// DecodeTimeout, per attempt.
func serveDecode(ctx context.Context, w http.ResponseWriter, s upstream.Sender, decodes []spec.Endpoint, build func(decode spec.Endpoint) upstream.Leg,
	opts Options, o *Outcome, log logrus.FieldLogger) {
	for k, d := range decodes {
		if !decodeOnce(ctx, w, s, build(d), k+1 < len(decodes), opts, o, log) {
			return
		}
		o.DecodeFailover = true
		log.WithFields(logrus.Fields{"endpoint": d.ID, "next": decodes[k+1].ID}).Warn("pd: decode unreachable, retrying on another decode")
	}
}

// decodeOnce runs one decode attempt. retry: the connection failed before
// the engine got the request and haveAlt allows another decode; nothing
// was written to the client.
func decodeOnce(ctx context.Context, w http.ResponseWriter, s upstream.Sender, leg upstream.Leg, haveAlt bool, opts Options, o *Outcome, log logrus.FieldLogger) (retry bool) {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut atomic.Bool
	t := time.AfterFunc(opts.DecodeTimeout, func() { timedOut.Store(true); cancel() })
	buf := make([]byte, 32<<10)
	p := sendAndPeek(dctx, s, leg, buf)
	if !t.Stop() && p.err == nil {
		p.resp.Body.Close()
		p.err = context.DeadlineExceeded
	}
	o.DecodeTTFB = p.ttfb
	status := 0
	if p.resp != nil && p.err == nil {
		status = p.resp.StatusCode
	}
	lr := legFor(PhaseDecode, leg.Endpoint, status, p.err, p.ttfb)
	if p.err != nil {
		switch {
		case ctx.Err() != nil:
			lr.Cancelled, lr.Died = true, false
			clientGone(o, PhaseDecode)
		case timedOut.Load():
			lr.TimedOut, lr.Died = true, false
			writeError(w, o, PhaseDecode, http.StatusGatewayTimeout, CodeDecodeTimeout, "decode endpoint sent no response in time")
		case shouldRetryDecode(lr, haveAlt):
			o.leg(lr)
			return true
		case lr.NotSent:
			writeError(w, o, PhaseDecode, http.StatusServiceUnavailable, CodePoolUnavailable, "decode endpoint unreachable")
		default:
			writeError(w, o, PhaseDecode, http.StatusBadGateway, CodeDecodeDied, "decode backend closed before any response bytes")
		}
		log.WithFields(logrus.Fields{"endpoint": leg.Endpoint.ID, "code": o.Code, "error": p.err}).Warn("pd: decode leg failed")
		o.leg(lr)
		return false
	}
	o.Status = status
	o.Relayed = status >= 400
	rr := relay(ctx, w, p, buf, opts, cancel, log)
	if rr.cut {
		lr.Died, lr.Err = true, errors.New("decode connection died mid-response")
		o.StreamCut = true
	}
	o.IdleTimeout = rr.idle
	if rr.clientGone {
		lr.Cancelled = true
		o.ClientGone, o.Code, o.FailedPhase = true, CodeClientGone, PhaseDecode
	}
	o.leg(lr)
	return false
}
