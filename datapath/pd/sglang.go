package pd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// defaultBootstrapPort is SGLang's bootstrap server port when a rule has
// none resolved (spec normally resolves it).
const defaultBootstrapPort = 8998

// sglang is SGLang's concurrent sequence: both legs get the same body plus
// the bootstrap triple (prefill host, bootstrap port, random room) and are
// dispatched together, because the prefill blocks until its decode joins
// the room on the prefill's bootstrap server. The client gets the decode
// response; the prefill response is drained and discarded.
type sglang struct{ opts Options }

func (d *sglang) Serve(ctx context.Context, w http.ResponseWriter, req *Request, pair Pair, s upstream.Sender) (o Outcome) {
	start := time.Now()
	o.Engine = spec.EngineSGLang
	defer func() { o.Total = time.Since(start) }()
	log := d.opts.Log.WithFields(logFields(o.Engine, req))

	obj, ok := clientObject(w, &o, req)
	if !ok {
		return o
	}
	header := legHeader(req.Header)
	if req.RequestID != "" {
		header.Set(headerRequestID, req.RequestID)
	}
	port := uint16(defaultBootstrapPort)
	if req.Rule != nil && req.Rule.PD != nil && req.Rule.PD.BootstrapPort != 0 {
		port = req.Rule.PD.BootstrapPort
	}
	switch shape := multiShape(&obj, req.Path); shape {
	case "":
	case ShapeN, ShapePromptList:
		d.fanOut(ctx, w, &o, req, &obj, header, pair, port, s, log)
		return o
	default:
		refuseShape(w, &o, "sglang", shape)
		return o
	}
	d.serveOne(ctx, w, &o, req.Path, header, &obj, pair, port, s, log)
	return o
}

// serveOne runs one sample's dual dispatch, with the one pair retry on a
// fresh room.
func (d *sglang) serveOne(ctx context.Context, w http.ResponseWriter, o *Outcome, path string, header http.Header, obj *object,
	pair Pair, port uint16, s upstream.Sender, log logrus.FieldLogger) {
	prefill := pair.Prefill
	decodes := pair.decodes()
	roomRetried := false
	for {
		// A fresh room per attempt: the old room died with its prefill (or
		// lost its decode) and must never be matched again.
		body := sglangBody(obj, prefill.Addr.Addr().String(), port, randUint63())
		switch d.attempt(ctx, w, o, path, header, body, prefill, decodes[0], s, !roomRetried, len(decodes) > 1, log) {
		case retryNone:
			return
		case retryDecode:
			o.DecodeFailover = true
			log.WithFields(logrus.Fields{"endpoint": decodes[0].ID, "next": decodes[1].ID}).
				Warn("pd: sglang decode unreachable, retrying the pair on another decode with a fresh room")
			decodes = decodes[1:]
		case retryPrefill:
			roomRetried, o.RoomRetry = true, true
			if len(pair.AltPrefill) > 0 {
				prefill = pair.AltPrefill[0]
			}
			log.WithField("endpoint", prefill.ID).Warn("pd: sglang prefill connection died, retrying pair with a fresh room")
		}
	}
}

// sgRetry is what an SGLang dual dispatch asks its caller to do next.
type sgRetry int

const (
	retryNone    sgRetry = iota // the client has been answered (or is gone)
	retryPrefill                // the prefill connection died: fresh room, alternate prefill
	retryDecode                 // the decode was never reached: fresh room, next decode
)

// sgPrefill is the prefill leg's drained response or failure.
type sgPrefill struct {
	status int
	header http.Header
	body   []byte
	err    error
	dur    time.Duration
}

// shouldRetrySGPair is the SGLang pair-retry rule: retry once, with a fresh
// room, only when the prefill connection failed before its response
// completed and the decode has produced no byte. An engine status (4xx/5xx)
// is an answer, never retried.
func shouldRetrySGPair(p sgPrefill, decodeBytes, budget bool) bool {
	return budget && !decodeBytes && p.err != nil
}

// attempt runs one dual dispatch. It returns true when the caller should
// retry the pair; otherwise the client response has been written (or the
// client is gone) and o is final.
func (d *sglang) attempt(ctx context.Context, w http.ResponseWriter, o *Outcome, path string, header http.Header, body []byte,
	prefillEP, decodeEP spec.Endpoint, s upstream.Sender, canRetry, haveAltDecode bool, log logrus.FieldLogger) (retry sgRetry) {
	pctx, cancelP := context.WithCancel(ctx)
	dctx, cancelD := context.WithCancel(ctx)
	prefCh := make(chan sgPrefill, 1)
	decCh := make(chan peek, 1)
	var wg sync.WaitGroup
	buf := make([]byte, 32<<10)
	start := time.Now()

	wg.Add(2)
	go func() {
		defer wg.Done()
		r := sgPrefill{}
		resp, err := s.Send(pctx, upstream.Leg{Endpoint: prefillEP, Path: path, Header: header, Body: body})
		if err == nil {
			r.status, r.header = resp.StatusCode, resp.Header
			r.body, err = readCapped(resp.Body, d.opts.MaxPrefillResponse)
			if errors.Is(err, errTooLarge) {
				// Only a 4xx body is ever relayed; drain the rest.
				_, err = io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
		}
		r.err, r.dur = err, time.Since(start)
		prefCh <- r
	}()
	go func() {
		defer wg.Done()
		decCh <- sendAndPeek(dctx, s, upstream.Leg{Endpoint: decodeEP, Path: path, Header: header, Body: body}, buf)
	}()

	var (
		pres        *sgPrefill
		dres        *peek
		decodeBytes bool
		pCancelled  bool
		dCancelled  bool
		rr          relayResult
		timedOut    bool
	)
	window := time.NewTimer(d.opts.PrefillTimeout)
	defer window.Stop()
	cancelPrefill := func() { pCancelled = pres == nil; cancelP() }
	cancelDecode := func() { dCancelled = dres == nil; cancelD() }

wait:
	for {
		select {
		case r := <-prefCh:
			pres = &r
			switch {
			case ctx.Err() != nil:
				continue // the ctx.Done case reports it
			case shouldRetrySGPair(r, false, canRetry):
				cancelDecode()
				retry = retryPrefill
				break wait
			case r.err != nil:
				cancelDecode()
				writeError(w, o, PhasePrefill, http.StatusBadGateway, CodeSGPrefillFailed, "prefill leg failed before decode produced output")
				break wait
			case r.status >= 400 && r.status < 500:
				// Relay the engine's rejection; the decode would never be served.
				cancelDecode()
				writeBuffered(w, r.status, r.header, r.body)
				o.Status, o.Relayed, o.FailedPhase = r.status, true, PhasePrefill
				break wait
			case r.status < 200 || r.status >= 300:
				cancelDecode()
				writeError(w, o, PhasePrefill, http.StatusBadGateway, CodeSGPrefillFailed, "prefill leg failed before decode produced output")
				break wait
			}
		case p := <-decCh:
			dres = &p
			o.DecodeTTFB = p.ttfb
			if p.err != nil {
				cancelPrefill()
				switch {
				case ctx.Err() != nil:
					clientGone(o, PhaseDecode)
				case shouldRetryDecode(LegResult{NotSent: upstream.NotSent(p.err)}, haveAltDecode):
					retry = retryDecode // the prefill is cancelled; its room is dropped
				case upstream.NotSent(p.err):
					writeError(w, o, PhaseDecode, http.StatusServiceUnavailable, CodePoolUnavailable, "sglang dual dispatch failed: decode endpoint unreachable")
				default:
					writeError(w, o, PhaseDecode, http.StatusBadGateway, CodeDecodeDied, "decode backend closed before any response bytes")
				}
				break wait
			}
			decodeBytes = true
			window.Stop()
			o.Status, o.Relayed = p.resp.StatusCode, p.resp.StatusCode >= 400
			rr = relay(ctx, w, p, buf, d.opts, cancelD, log)
			cancelPrefill() // the prefill is moot once decode has finished
			break wait
		case <-window.C:
			timedOut = true
			cancelPrefill()
			cancelDecode()
			writeError(w, o, PhasePrefill, http.StatusGatewayTimeout, CodePrefillTimeout, "prefill/decode rendezvous did not complete in time")
			break wait
		case <-ctx.Done():
			cancelPrefill()
			cancelDecode()
			clientGone(o, PhaseDecode)
			break wait
		}
	}
	cancelP()
	cancelD()
	wg.Wait()
	if pres == nil {
		r := <-prefCh
		pres = &r
	}
	if dres == nil {
		p := <-decCh
		dres = &p
		if p.resp != nil {
			p.resp.Body.Close()
		}
	}

	if pres.err == nil {
		o.Prefill = pres.dur
	}
	pl := legFor(PhasePrefill, prefillEP, pres.status, pres.err, pres.dur)
	if pCancelled && pres.err != nil {
		pl.Cancelled, pl.Died, pl.NotSent = true, false, false
		pl.TimedOut = timedOut
	}
	dStatus := 0
	if dres.resp != nil {
		dStatus = dres.resp.StatusCode
	}
	dl := legFor(PhaseDecode, decodeEP, dStatus, dres.err, dres.ttfb)
	if dCancelled && dres.err != nil {
		dl.Cancelled, dl.Died, dl.NotSent = true, false, false
		dl.TimedOut = timedOut
	}
	if rr.cut {
		dl.Died, dl.Err = true, errors.New("decode connection died mid-response")
		o.StreamCut = true
	}
	o.IdleTimeout = rr.idle
	if rr.clientGone {
		dl.Cancelled = true
		o.ClientGone, o.Code, o.FailedPhase = true, CodeClientGone, PhaseDecode
	}
	o.leg(pl)
	o.leg(dl)
	if pres.err != nil || pres.status >= 400 {
		log.WithFields(logrus.Fields{"endpoint": prefillEP.ID, "status": pres.status, "error": pres.err, "decode_bytes": decodeBytes}).Debug("pd: sglang prefill leg ended badly")
	}
	return retry
}
