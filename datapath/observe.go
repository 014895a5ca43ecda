package datapath

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/accesslog"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/datapath/respclock"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/tenant"
	"go.opentelemetry.io/otel/trace"
)

// reqObs is what one request's access line, client-side latency histograms
// and trace are made of. A few one-line hooks on the request path fill it
// (observeBegin, the rule match, the chosen endpoint, the P/D outcome);
// observeEnd turns it into the line, the observations and the spans, so
// the serving code knows nothing about any of them.
type reqObs struct {
	clock respclock.Writer // the client's ResponseWriter, timed

	c        *compiled // the matched rule's generation; nil: none matched
	model    string    // the request's model when the gateway read it
	endpoint int       // the endpoint that answered (single pool, or the served decode); -1: none
	tier     string    // what chose the endpoint
	picker   string    // what chose the single-pool endpoint of the attempt sent (choose); tier when tier is unset
	prefill  int       // the P/D prefill; -1: none
	legs     accesslog.Legs
	pdLegs   []pd.LegResult

	answerModel bool // model came from the engine's answer, not the request

	// Tracing (traced.go): the request's span (nil: not traced), the P/D
	// ladder steps and when the dialect took over.
	span    trace.Span
	steps   []ladder.Step
	decided time.Time

	labelled bool // modelLabel resolved
	label    string
	ms       *modelSeries       // the rule's children under label; resolved by series
	itl      *metrics.Histogram // resolved at the first gap
	llm      *metrics.LLM
}

// observeBegin times the client's response from here on: every write to
// x.w goes through the clock.
func (rt *Runtime) observeBegin(x *exchange) {
	o := &x.obs
	o.endpoint, o.prefill = -1, -1
	o.llm = rt.llm
	o.clock.Gaps = o
	o.clock.Head = o
	o.clock.Reset(x.w)
	o.clock.Start = &x.start
	x.w = &o.clock
	rt.traceBegin(x)
}

// matched records the rule and the model known at the rule match.
func (o *reqObs) matched(c *compiled, model string) {
	o.c = c
	if model != "" {
		o.model = model
	}
}

// pdServed records the P/D decision and outcome: the tier that chose the
// prefill, both endpoints, every leg.
func (o *reqObs) pdServed(c *compiled, tr *ladder.Trace, out *pd.Outcome, model string, served int) {
	if model != "" {
		o.model, o.answerModel = model, false
	}
	o.endpoint, o.prefill = served, tr.Prefill.Index
	for _, s := range tr.Steps {
		if s.Hit {
			o.tier = s.Tier
			break
		}
	}
	o.pdLegs = out.Legs
	if o.span != nil {
		o.steps, o.decided = tr.Steps, time.Now().Add(-out.Total)
	}
	for _, l := range out.Legs {
		o.legs = append(o.legs, accesslog.Leg{Phase: string(l.Phase), Endpoint: l.Endpoint.ID, Status: l.Status, MS: accesslog.MS(l.Duration)})
	}
}

// FirstBytes takes the model the engine names at the head of its answer
// when the gateway did not read the request's (respclock.FirstBytes).
func (o *reqObs) FirstBytes(b []byte) {
	if o.model == "" && o.c != nil {
		o.model = o.c.answerModels.read(b)
		o.answerModel = o.model != ""
	}
}

// answerModel is the first "model" string in the head of an engine's
// answer (OpenAI objects and chunks carry it at the top level, Anthropic's
// message_start one level down), nil when none is there or it is not a
// plain string of at most maxAnswerModel bytes. The bytes are b's.
func answerModel(b []byte) []byte { return plainString(modelValue(b)) }

// modelValue is what follows the opening quote of the first "model"
// string in b, nil when b has no "model" key or its value is not a string.
func modelValue(b []byte) []byte {
	i := indexModelKey(b)
	if i < 0 {
		return nil
	}
	rest := b[i+len(modelKey):]
	if len(rest) > 0 && rest[0] == ' ' { // engines write "model":"…": only a spaced key pays for the trim
		rest = bytes.TrimLeft(rest, " ")
	}
	if len(rest) == 0 || rest[0] != '"' {
		return nil
	}
	return rest[1:]
}

// plainString is the string that opened before v, up to its closing
// quote; nil when it is empty, longer than maxAnswerModel, escaped or
// not closed in v.
func plainString(v []byte) []byte {
	end := bytes.IndexByte(v, '"')
	if end <= 0 || end > maxAnswerModel || bytes.IndexByte(v[:end], '\\') >= 0 {
		return nil
	}
	return v[:end]
}

// modelKey is the key answerModel looks for, and modelKeyWord its eight
// bytes as one little-endian word (TestModelKeyWord holds them together).
const (
	modelKey     = `"model":`
	modelKeyWord = 0x3a226c65646f6d22
)

// indexModelKey is bytes.Index(b, modelKey), found from the key's 'm'.
// Why: bytes.Index scans for the key's first byte, the quote that opens
// every key and string of the answer, and checks each; an 'm' is rarer
// (an answer names "model" after its "id" and "object", a few 'm's in).
// Each 'm' is checked as the key's second byte by one word compare.
func indexModelKey(b []byte) int {
	for off := 0; off < len(b); {
		j := bytes.IndexByte(b[off:], 'm')
		if j < 0 {
			return -1
		}
		j += off
		if j > 0 && j+len(modelKey)-1 <= len(b) && binary.LittleEndian.Uint64(b[j-1:]) == modelKeyWord {
			return j - 1
		}
		off = j + 1
	}
	return -1
}

// lastModel is a rule's last model name read from an answer. Why: the
// name was copied into a new string for every request whose body the
// gateway did not read (0.65 of the proxy's 8.7 allocations per small
// request), while a rule's engines nearly always name the same model; one
// atomic load and a compare reuse the previous copy. A new name costs two
// allocations (the copy and the pointer stored), one more than a plain
// copy: answers alternating between models would pay that every request.
type lastModel struct{ p atomic.Pointer[string] }

// read is answerModel(b) as a string (string's). When the value starts
// with the last name and its closing quote, that is the whole value: the
// last name came from plainString, so it holds no quote or backslash and
// fits the bound, and no search for either is needed.
func (l *lastModel) read(b []byte) string {
	v := modelValue(b)
	if last := l.p.Load(); last != nil && len(v) > len(*last) && v[len(*last)] == '"' && string(v[:len(*last)]) == *last {
		return *last
	}
	return l.string(plainString(v))
}

// string returns b as a string, the previous one when b spells it.
func (l *lastModel) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if last := l.p.Load(); last != nil && *last == string(b) {
		return *last
	}
	s := string(b)
	l.p.Store(&s)
	return s
}

// maxAnswerModel bounds a model name read from an answer.
const maxAnswerModel = 128

// modelLabel is the bounded model label of this request's LLM series: the
// rule's pinned model, else the model if the engines served it (learned up
// to the rule's cap), else "other".
func (o *reqObs) modelLabel() string {
	if !o.labelled {
		o.settleLabel()
	}
	return o.label // inlined: once settled (series does it), a load
}

// settleLabel resolves the label once, out of modelLabel's line so that
// modelLabel stays inlined.
func (o *reqObs) settleLabel() {
	o.labelled = true
	o.label = o.c.llmModels.Label(o.model, o.clock.Status() >= 200 && o.clock.Status() < 300)
}

// series is the rule's cached LLM children under this request's model
// label (hotmetrics.go), so a request looks its histograms up once per
// rule generation and label rather than by label values each time.
//
// A model whose label is its own name keeps it for the rule's life (a
// pinned model, or a learned one: ModelLabels never forgets), so the
// rule's latest such model (llmSeries.known) answers both lookups, the
// label's and the children's, with one atomic load and a compare; the
// name is usually the very string of the last request (lastModel).
func (o *reqObs) series() *modelSeries {
	if o.ms != nil {
		return o.ms
	}
	if !o.labelled && o.model != "" {
		if ms := o.c.llm.known(o.model); ms != nil {
			o.labelled, o.label, o.ms = true, o.model, ms
			return ms
		}
	}
	o.ms = o.c.llm.model(o.modelLabel())
	if o.label == o.model && o.model != "" {
		o.c.llm.remember(o.ms)
	}
	return o.ms
}

// Gap observes one inter-token gap of a stream (respclock.Gaps).
func (o *reqObs) Gap(d time.Duration) {
	if o.c == nil || o.llm == nil {
		return
	}
	if o.itl == nil {
		o.itl = o.series().itl.get(o.llm.ITL, o.c.label, o.modelLabel())
	}
	o.itl.Observe(d.Seconds())
}

// observeEnd runs when the handler returns (after a recovered panic's 500):
// the LLM histograms, then the access line.
func (rt *Runtime) observeEnd(x *exchange) {
	o := &x.obs
	// The answer's end when the relay or fail marked it; a traced request
	// reads the clock again, as its span must also hold the engine leg's,
	// which ends when the engine's body is closed after that mark.
	end, total := x.end, x.total
	if end.IsZero() || o.span != nil {
		end = time.Now()
		total = end.Sub(x.start)
	}
	status := o.clock.Status()
	// The context last: an answer with bytes out needs no look at it (its
	// Err, a load of the connection context's cold line, was 0.24 % of
	// the daemon's samples).
	if status != 0 && o.clock.Bytes() == 0 && x.r.Context().Err() != nil {
		status = statusClientClosed
	}
	ttft := sinceStart(o.clock.First(), x)
	var prompt, completion int
	var metered bool
	// The rule meters usage when the client's writer is the tenant's. Not
	// a helper: one costs 88 to the inliner (its budget is 80) and a call
	// ~18 instructions a request.
	if uw, ok := x.w.(*tenant.UsageWriter); ok {
		prompt, completion, metered = uw.Usage()
	}
	c := o.c
	if c != nil && o.endpoint >= 0 && o.tier == "" {
		o.tier = o.picker
		if o.tier == "" {
			o.tier = c.rule.Selector.String()
		}
	}
	if c != nil && rt.llm != nil {
		rt.observeLLM(x, status, ttft, total, completion, metered)
	}
	// The error code goes only to the span and the access line: without
	// either, no lookup of it in the answer's header.
	if o.span == nil && !rt.access.Writing() {
		return
	}
	code := canonicalGet(o.clock.Header(), HeaderError)
	if status == statusClientClosed {
		code = codeClientClosed
	}
	rt.traceEnd(x, &traceFacts{end: end, status: status, code: code, ttft: ttft, metered: metered, prompt: prompt, completion: completion})
	if !rt.access.Writing() {
		return
	}
	e := accesslog.Entry{
		Start: x.start, RequestID: x.requestID, Method: x.r.Method, Path: x.r.URL.Path,
		Model: o.model, Client: clientIP(x.r.RemoteAddr), Status: status, Code: code,
		Tier: o.tier, Legs: o.legs, TTFT: ttft, Total: total, BytesOut: o.clock.Bytes(),
		Metered: metered, PromptTokens: prompt, CompletionTokens: completion,
	}
	if o.span != nil {
		e.TraceID = o.span.SpanContext().TraceID().String()
	}
	if a, ok := x.r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		e.VIP = a.String()
	}
	if c != nil {
		e.Rule = c.label
		if o.endpoint >= 0 && o.endpoint < len(c.eps) {
			e.Endpoint = c.eps[o.endpoint].id
		}
		if o.prefill >= 0 && o.prefill < len(c.eps) {
			e.Prefill = c.eps[o.prefill].id
		}
	}
	rt.access.Log(&e)
}

// sinceStart is t less x's start (zero for a zero t). When t is the end's
// reading (a small answer's head, first byte and end are one), it is
// finishedAt's total: no Time.Sub (==, not Equal: the same value is the
// same reading, and == is no call).
func sinceStart(t time.Time, x *exchange) time.Duration {
	switch {
	case t.IsZero():
		return 0
	case t == x.end:
		return x.total
	}
	return t.Sub(x.start)
}

// observeLLM feeds the client-side LLM families. Only successful answers
// count: an error page's first byte is not a token.
func (rt *Runtime) observeLLM(x *exchange, status int, ttft, total time.Duration, completion int, metered bool) {
	o := &x.obs
	c := o.c
	secs := total.Seconds() // the endpoint's serve and the model's duration alike
	if i := o.endpoint; i >= 0 && i < len(c.eps) {
		c.epm[i].serve.get(rt.llm.Endpoint, c.label, c.eps[i].id, metrics.EndpointPhaseServe).Observe(secs)
	}
	for _, l := range o.pdLegs {
		if l.Phase == pd.PhasePrefill && l.Status > 0 {
			rt.llm.Endpoint.WithLabelValues(c.label, l.Endpoint.ID, metrics.EndpointPhasePrefill).Observe(l.Duration.Seconds())
		}
	}
	if status < 200 || status >= 300 {
		return
	}
	ms := o.series() // first: it may settle the label too
	model := o.modelLabel()
	ms.duration.get(rt.llm.Duration, c.label, model).Observe(secs)
	if ttft > 0 {
		ms.ttft.get(rt.llm.TTFT, c.label, model).Observe(ttft.Seconds())
	}
	if !o.clock.Streamed() {
		return
	}
	tokens := o.clock.Events()
	if metered {
		tokens = completion
	}
	if span := o.clock.EventSpan(); tokens > 1 && span > 0 {
		ms.tpot.get(rt.llm.TPOT, c.label, model).Observe(span.Seconds() / float64(tokens-1))
	}
}
