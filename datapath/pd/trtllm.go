package pd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
)

// trtllm is the TensorRT-LLM disaggregated sequence: a context_only request
// to the context server, then the client's request to the generation server
// with the context's disaggregated_params (request_type → generation_only).
// The engine rejects unknown fields, so nothing else is ever added.
type trtllm struct {
	opts Options
}

// Finish reasons that mean "the context step did not finish the request".
const (
	finishLength      = "length"
	finishNotFinished = "not_finished"
)

// trtContextResponse is the typed overlay of a context response: only the
// first choice's finish_reason and disaggregated_params are read, raw. The
// struct tags are the wire names (choices, finish_reason and
// fieldDisaggParams); tags cannot reference constants.
type trtContextResponse struct {
	Choices []struct {
		FinishReason json.RawMessage `json:"finish_reason"`
		Disagg       json.RawMessage `json:"disaggregated_params"`
	} `json:"choices"`
}

func (d *trtllm) Serve(ctx context.Context, w http.ResponseWriter, req *Request, pair Pair, s upstream.Sender) Outcome {
	return serve(&seq{ctx: ctx, w: w, req: req, pair: pair, s: s, opts: d.opts, bodies: d.opts.Buffers}, spec.EngineTRTLLM, runTRTLLM)
}

// trtTransferFields is TensorRT-LLM's client transfer state (read-only).
var trtTransferFields = []string{fieldDisaggParams}

func (*trtllm) TransferFields() []string { return trtTransferFields }

// trtAdminPaths are trtllm-serve's internal APIs: the KV event feed (the
// gateway's own KV-exact poller reads it directly from the engine, never
// through a VIP), per-request perf records and the disaggregated server's
// clock sync (read-only).
var trtAdminPaths = []string{"/kv_cache_events", "/perf_metrics", "/steady_clock_offset"}

// trtSealedPaths stay closed even on rules that open admin paths:
// POST /kv_cache_events drains the engine's event queue, so a client's call
// takes events from whoever else reads it (the KV-exact poller's inventory
// silently loses blocks) — not an operator API to hand out (read-only).
var trtSealedPaths = []string{"/kv_cache_events"}

// Split: the disaggregated server splits completions and chat; anything
// else (its disaggregated server has no Responses route) goes to a
// generation server, which serves it standalone without
// disaggregated_params.
func (*trtllm) Split(path string) Split {
	switch path {
	case pathCompletions, pathChatCompletions:
		return Split{Sequence: true}
	}
	return Split{Role: spec.RoleDecode}
}

// runTRTLLM is the sequence: context (with one failover), then generation
// with the context's disaggregated_params, or the context's own answer
// when it already finished the request.
func runTRTLLM(q *seq) {
	req, o := q.req, q.o
	if shape := multiShape(&q.obj, req.Path); shape != "" {
		q.refuseShape("TensorRT-LLM", shape)
		return
	}
	header := q.sharedHeader()

	// A fresh disagg id per dispatch: a retried context must not collide
	// with a half-finished one on the same engine.
	// One buffer serves every context attempt and then the generation
	// body: each leg's send has returned before the next body is written.
	buf := q.bodies.Get(decodeRoom(len(q.obj.raw)))
	defer func() { q.bodies.Put(buf) }()
	build := func(prefill spec.Endpoint) upstream.Leg {
		buf = trtContextBodyInto(buf, &q.obj, randUint63())
		return upstream.Leg{Endpoint: prefill, Path: req.Path, Header: header, Body: buf}
	}
	r, _, ok, done := q.prefillWithFailover(build, prefillWords{leg: "context", fallback: "generation serves standalone"})
	if done {
		return
	}
	var params []byte
	if ok {
		var cr trtContextResponse
		switch err := json.Unmarshal(r.body, &cr); {
		case err != nil || len(cr.Choices) == 0:
			o.KVTransferFailed = true
		case r.leg.Status == http.StatusOK && isEarlyExit(cr.Choices[0].FinishReason):
			o.EarlyExit, o.Status = true, http.StatusOK
			writeEarlyExit(q.w, r.header, r.body, q.obj.isTrue(fieldStream))
			q.log.Debug("pd: context finished the request, no generation leg")
			return
		case len(cr.Choices[0].Disagg) > 0 && cr.Choices[0].Disagg[0] == '{':
			params = cr.Choices[0].Disagg
		default:
			o.KVTransferFailed = true
		}
	}

	body, err := trtGenerationBodyInto(buf, &q.obj, params)
	if err != nil {
		// Malformed params: serve standalone rather than fail the client.
		o.KVTransferFailed = true
		body, _ = trtGenerationBodyInto(buf, &q.obj, nil)
	}
	buf = body
	q.serveDecode(func(gen spec.Endpoint) upstream.Leg {
		return upstream.Leg{Endpoint: gen, Path: req.Path, Header: header, Body: body}
	})
}

// isEarlyExit is the early-exit rule: the context step finished the request
// when the first choice's finish_reason is a string other than "length" or
// "not_finished". null, absent or malformed values proceed to generation.
func isEarlyExit(finishReason json.RawMessage) bool {
	var s string
	if len(finishReason) == 0 || finishReason[0] != '"' || json.Unmarshal(finishReason, &s) != nil {
		return false
	}
	return s != finishLength && s != finishNotFinished
}

// writeEarlyExit returns the context response as the answer: verbatim, or
// as a one-event SSE stream when the client asked to stream (the event is
// the compacted completion object, then [DONE]).
func writeEarlyExit(w http.ResponseWriter, header http.Header, body []byte, stream bool) {
	if !stream {
		writeBuffered(w, http.StatusOK, header, body)
		return
	}
	var c bytes.Buffer
	c.Grow(len(body) + 32)
	c.WriteString("data: ")
	if err := json.Compact(&c, body); err != nil {
		c.Truncate(len("data: "))
		c.Write(bytes.ReplaceAll(body, []byte("\n"), nil))
	}
	c.WriteString("\n\n")
	c.Write(sseDone)
	h := w.Header()
	h.Set("Content-Type", contentTypeSSE)
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(c.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(c.Bytes())
}

// trtContextBody rewrites a client body into a TensorRT-LLM context-only
// request. Nothing may be added besides disaggregated_params: the engine
// rejects unknown fields (extra="forbid"), so no cap or n rewrite.
func trtContextBody(o *object, disaggID uint64) []byte {
	return trtContextBodyInto(nil, o, disaggID)
}

// trtContextBodyInto is trtContextBody written into buf's memory when it
// fits (applyOwnInto).
func trtContextBodyInto(buf []byte, o *object, disaggID uint64) []byte {
	var b [96]byte
	p := append(b[:0], `{"`+fieldRequestType+`":"`+trtContextOnly+`","`+fieldDisaggRequestID+`":`...)
	p = strconv.AppendUint(p, disaggID, 10)
	p = append(p, '}')
	return o.applyOwnInto(buf, []edit{
		{fieldStream, jsonFalse},
		{fieldStreamOptions, nil},
		{fieldDisaggParams, p},
	})
}

// trtGenerationBody is the client's body plus the context response's
// disaggregated_params with request_type set to generation_only; every
// other engine field (ctx_request_id, opaque state, first tokens) is
// relayed verbatim. params nil: the generation leg serves standalone.
func trtGenerationBody(o *object, params []byte) ([]byte, error) {
	return trtGenerationBodyInto(nil, o, params)
}

// trtGenerationBodyInto is trtGenerationBody written into buf's memory
// when it fits (applyOwnInto): buf must be a leg body no send still reads.
func trtGenerationBodyInto(buf []byte, o *object, params []byte) ([]byte, error) {
	if params == nil {
		return o.applyOwnInto(buf, []edit{{fieldDisaggParams, nil}}), nil
	}
	po, err := parseObject(params)
	if err != nil {
		return nil, fmt.Errorf("context disaggregated_params: %w", err)
	}
	gp := po.apply([]edit{{fieldRequestType, []byte(`"` + trtGenerationOnly + `"`)}})
	return o.applyOwnInto(buf, []edit{{fieldDisaggParams, gp}}), nil
}
