package pd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
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
type sglang struct {
	opts Options
}

func (d *sglang) Serve(ctx context.Context, w http.ResponseWriter, req *Request, pair Pair, s upstream.Sender) Outcome {
	return serve(&seq{ctx: ctx, w: w, req: req, pair: pair, s: s, opts: d.opts, bodies: d.opts.Buffers}, spec.EngineSGLang, runSGLang)
}

// sglangTransferFields is SGLang's client transfer state: the bootstrap
// triple (read-only).
var sglangTransferFields = []string{fieldBootstrapHost, fieldBootstrapPort, fieldBootstrapRoom}

func (*sglang) TransferFields() []string { return sglangTransferFields }

// sglangAdminPaths are SGLang's operator APIs (the routes its HTTP server
// marks admin-only when an admin key is set, plus /shutdown and the
// hierarchical-cache controls): cache flushes, weight updates, memory
// release, profiling, LoRA loading, aborts of other tenants' requests
// (read-only).
var sglangAdminPaths = []string{
	"/flush_cache", "/shutdown", "/set_internal_state", "/set_trace_level",
	"/start_profile", "/stop_profile", "/freeze_gc",
	"/start_expert_distribution_record", "/stop_expert_distribution_record", "/dump_expert_distribution_record",
	"/update_weights_from_disk", "/update_weights_from_tensor", "/update_weights_from_distributed",
	"/update_weights_from_ipc", "/update_weight_version", "/get_weights_by_name", "/weights_checker",
	"/init_weights_update_group", "/destroy_weights_update_group",
	"/init_weights_send_group_for_remote_instance", "/send_weights_to_remote_instance",
	"/get_remote_instance_transfer_engine_info", "/remote_instance_transfer_engine_info",
	"/release_memory_occupation", "/resume_memory_occupation", "/slow_down",
	"/load_lora_adapter", "/load_lora_adapter_from_tensors", "/unload_lora_adapter",
	"/configure_logging", "/abort_request", "/pause_generation", "/continue_generation",
	"/add_external_corpus", "/remove_external_corpus", "/list_external_corpora",
	"/clear_hicache_storage_backend", "/hicache/*",
}

// Split: the bootstrap rendezvous works on the OpenAI generation APIs. Any
// other cannot be split, and an SGLang decode cannot answer without a
// prefill's room, so only a role-0 endpoint may serve it (Strict).
func (*sglang) Split(path string) Split {
	switch path {
	case pathCompletions, pathChatCompletions, pathResponses:
		return Split{Sequence: true}
	}
	return Split{Role: spec.RoleAny, Strict: true}
}

// sgSeq is one SGLang request (or one fan-out unit): the common sequence
// state plus the rule's bootstrap port.
type sgSeq struct {
	*seq
	port uint16
}

// runSGLang serves a plain request as one dual dispatch and a multi-sample
// one as a fan-out of them.
func runSGLang(q *seq) {
	q.head = q.sharedHeader()
	sq := sgSeq{seq: q, port: defaultBootstrapPort}
	if r := q.req.Rule; r != nil && r.PD != nil && r.PD.BootstrapPort != 0 {
		sq.port = r.PD.BootstrapPort
	}
	switch shape := multiShape(&q.obj, q.req.Path); shape {
	case "":
		sq.serveOne()
	case ShapeN, ShapePromptList:
		sq.fanOut()
	default:
		q.refuseShape("sglang", shape)
	}
}

// serveOne runs one sample's dual dispatch, with the one pair retry on a
// fresh room.
func (q sgSeq) serveOne() {
	prefill := q.pair.Prefill
	decodes := q.pair.decodes()
	roomRetried := false
	// The shared leg body's memory: an attempt returns only once both of
	// its sends have, so a retry may overwrite it and the pool may have it
	// back at the end.
	buf := q.bodies.Get(len(q.obj.raw) + sgBodyRoom)
	defer func() { q.bodies.Put(buf) }()
	for {
		// A fresh room per attempt: the old room died with its prefill (or
		// lost its decode) and must never be matched again.
		pbody, dbody := q.legBodies(buf, prefill) // sglang_dp.go
		buf = dbody
		switch q.attempt(pbody, dbody, prefill, decodes, !roomRetried) {
		case retryNone:
			return
		case retryDecode:
			q.o.DecodeFailover = true
			q.log.WithFields(logrus.Fields{"endpoint": decodes[0].ID, "next": decodes[1].ID}).
				Warn("pd: sglang decode unreachable, retrying the pair on another decode with a fresh room")
			decodes = decodes[1:]
		case retryPrefill:
			roomRetried, q.o.RoomRetry = true, true
			if len(q.pair.AltPrefill) > 0 {
				prefill = q.pair.AltPrefill[0]
			}
			q.log.WithField("endpoint", prefill.ID).Warn("pd: sglang prefill connection died, retrying pair with a fresh room")
		}
	}
}

// bootstrapPort is the port decodes join prefill on: the endpoint's own
// bootstrap_port, else the rule's pdBootstrapPort.
func (q sgSeq) bootstrapPort(prefill spec.Endpoint) uint16 {
	if prefill.BootstrapPort != 0 {
		return prefill.BootstrapPort
	}
	return q.port
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

// attempt runs one dual dispatch of body on prefillEP and decodes[0]
// (decodes[1:] are the decodes left for a retry; canRetry is the pair
// retry's budget). Unless it asks for a retry, the client response has
// been written (or the client is gone) and the outcome is final.
func (q sgSeq) attempt(pbody, dbody []byte, prefillEP spec.Endpoint, decodes []spec.Endpoint, canRetry bool) (retry sgRetry) {
	ctx, w, o, s, log := q.ctx, q.w, q.o, q.s, q.log
	path, header, decodeEP, haveAltDecode := q.req.Path, q.head, decodes[0], len(decodes) > 1
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
		resp, err := s.Send(pctx, upstream.Leg{Endpoint: prefillEP, Path: path, Header: header, Body: pbody})
		if err == nil {
			r.status, r.header = resp.StatusCode, resp.Header
			r.body, err = readCapped(resp.Body, q.opts.MaxPrefillResponse)
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
		decCh <- sendAndPeek(dctx, s, upstream.Leg{Endpoint: decodeEP, Path: path, Header: header, Body: dbody}, buf)
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
	window := time.NewTimer(q.opts.PrefillTimeout)
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
				q.fail(PhasePrefill, http.StatusBadGateway, CodeSGPrefillFailed, "prefill leg failed before decode produced output")
				break wait
			case r.status >= 400 && r.status < 500:
				// Relay the engine's rejection; the decode would never be served.
				cancelDecode()
				writeBuffered(w, r.status, r.header, r.body)
				o.Status, o.Relayed, o.FailedPhase = r.status, true, PhasePrefill
				break wait
			case r.status < 200 || r.status >= 300:
				cancelDecode()
				q.fail(PhasePrefill, http.StatusBadGateway, CodeSGPrefillFailed, "prefill leg failed before decode produced output")
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
				case upstream.NotSent(p.err) && q.pair.Unsplit:
					o.DecodeUnreachable, o.FailedPhase = true, PhaseDecode
				case upstream.NotSent(p.err):
					q.fail(PhaseDecode, http.StatusServiceUnavailable, CodePoolUnavailable, "sglang dual dispatch failed: decode endpoint unreachable")
				default:
					q.fail(PhaseDecode, http.StatusBadGateway, CodeDecodeDied, "decode backend closed before any response bytes")
				}
				break wait
			}
			decodeBytes = true
			window.Stop()
			o.Status, o.Relayed = p.resp.StatusCode, p.resp.StatusCode >= 400
			switch {
			case p.resp.StatusCode != http.StatusOK || !wantsLogprobs(&q.obj):
				rr = q.relay(p, buf, cancelD)
			case q.obj.isTrue(fieldStream):
				pres, rr = q.mergeStream(ctx, p, pres, prefCh, buf, cancelD) // sglang_logprobs_stream.go
			default:
				pres, rr = q.mergeDecode(ctx, p, pres, prefCh) // sglang_logprobs.go
			}
			cancelPrefill() // the prefill is moot once decode has finished
			break wait
		case <-window.C:
			// Answered once both legs are back: a leg still waiting for a
			// connection makes it a pool timeout (sgWindowFailed).
			timedOut = true
			cancelPrefill()
			cancelDecode()
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
	dStatus := 0
	if dres.resp != nil {
		dStatus = dres.resp.StatusCode
	}
	dl := legFor(PhaseDecode, decodeEP, dStatus, dres.err, dres.ttfb)
	if timedOut {
		q.sgWindowFailed(&pl, &dl) // poolwait.go
	}
	if pCancelled && pres.err != nil && !pl.PoolWait {
		pl.Cancelled, pl.Died, pl.NotSent = true, false, false
		pl.TimedOut = timedOut && !dl.PoolWait
	}
	if dCancelled && dres.err != nil && !dl.PoolWait {
		dl.Cancelled, dl.Died, dl.NotSent = true, false, false
		dl.TimedOut = timedOut && !pl.PoolWait
	}
	q.endRelay(&dl, rr)
	o.leg(pl)
	o.leg(dl)
	if pres.err != nil || pres.status >= 400 {
		log.WithFields(logrus.Fields{"endpoint": prefillEP.ID, "status": pres.status, "error": pres.err, "decode_bytes": decodeBytes}).Debug("pd: sglang prefill leg ended badly")
	}
	return retry
}

// sglangBody injects the bootstrap triple, and any further edits (the
// prefill's DP rank), into a client body; nothing else changes (SGLang's
// prefill keeps stream and max_tokens).
func sglangBody(o *object, host string, port uint16, room uint64, more ...edit) []byte {
	return sglangBodyInto(nil, o, host, port, room, more...)
}

// sgBodyRoom is what the bootstrap triple adds to a client body at most:
// three keys, a quoted host (an IPv6 address at most) and two numbers.
const sgBodyRoom = 256

// sglangBodyInto is sglangBody written into buf's memory when it fits
// (applyOwnInto): buf must be a leg body no send still reads.
func sglangBodyInto(buf []byte, o *object, host string, port uint16, room uint64, more ...edit) []byte {
	var hb [64]byte
	h := strconv.AppendQuote(hb[:0], host)
	var pb, rb [24]byte
	return o.applyOwnInto(buf, append([]edit{
		{fieldBootstrapHost, h},
		{fieldBootstrapPort, strconv.AppendUint(pb[:0], uint64(port), 10)},
		{fieldBootstrapRoom, strconv.AppendUint(rb[:0], room, 10)},
	}, more...))
}
