package datapath

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/buildinfo"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tracing"
	"github.com/sirupsen/logrus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// newTracer builds the runtime's tracer from its options; a configuration
// the exporter refuses leaves tracing off with an error logged (serve
// validates the options before it gets here).
func newTracer(o tracing.Options, log logrus.FieldLogger) *tracing.Tracer {
	t, err := tracing.New(o, buildinfo.Get().Version)
	if err != nil {
		log.WithError(err).Error("tracing disabled")
		return nil
	}
	return t
}

// traceBegin starts the request's server span (a child of the client's
// traceparent) and puts it in the request's context, where the traced
// sender finds it for the engine legs.
func (rt *Runtime) traceBegin(x *exchange) {
	if rt.tracer == nil {
		return
	}
	ctx, span := rt.tracer.StartRequest(x.r.Context(), x.r.Header, "gateway "+x.r.Method, x.start)
	if !span.IsRecording() {
		return // unsampled: the legs still carry the client's trace context
	}
	x.r = x.r.WithContext(ctx)
	x.obs.span = span
}

// traceEnd finishes the request span at end: the GenAI and HTTP
// attributes, and one child span per ladder step of a P/D decision.
func (rt *Runtime) traceEnd(x *exchange, e *traceFacts) {
	o := &x.obs
	span := o.span
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String(tracing.AttrHTTPMethod, x.r.Method),
		attribute.String(tracing.AttrURLPath, x.r.URL.Path),
		attribute.Int(tracing.AttrHTTPStatus, e.status),
		attribute.String(tracing.AttrRequestID, x.requestID),
	}
	if op := genAIOperation(x.r.URL.Path); op != "" {
		attrs = append(attrs, attribute.String(tracing.AttrGenAIOperation, op))
	}
	if o.model != "" {
		key := tracing.AttrGenAIRequestModel
		if o.answerModel {
			key = tracing.AttrGenAIResponseModel
		}
		attrs = append(attrs, attribute.String(key, o.model))
	}
	if e.ttft > 0 {
		attrs = append(attrs, attribute.Float64(tracing.AttrGenAITTFT, e.ttft.Seconds()))
	}
	if e.metered {
		attrs = append(attrs, attribute.Int(tracing.AttrGenAIInputTokens, e.prompt), attribute.Int(tracing.AttrGenAIOutputTokens, e.completion))
	}
	if c := o.c; c != nil {
		attrs = append(attrs, attribute.String(tracing.AttrRule, c.label))
		if o.endpoint >= 0 && o.endpoint < len(c.eps) {
			attrs = append(attrs, attribute.String(tracing.AttrEndpoint, c.eps[o.endpoint].id))
		}
	}
	if o.tier != "" {
		attrs = append(attrs, attribute.String(tracing.AttrTier, o.tier))
	}
	if e.code != "" {
		attrs = append(attrs, attribute.String(tracing.AttrError, e.code))
	}
	span.SetAttributes(attrs...)
	if e.status >= 500 || (e.code != "" && e.code != codeClientClosed) {
		span.SetStatus(codes.Error, e.code)
	}
	ctx := trace.ContextWithSpan(context.Background(), span)
	for _, s := range o.steps {
		_, ts := rt.tracer.Start(ctx, "ladder "+s.Tier, trace.WithTimestamp(o.decided), trace.WithAttributes(
			attribute.String(tracing.AttrTier, s.Tier), attribute.String(tracing.AttrTierOutcome, stepOutcome(s)),
			attribute.String(tracing.AttrTierReason, s.Reason), attribute.String(tracing.AttrEndpoint, s.Choice)))
		ts.End(trace.WithTimestamp(o.decided))
	}
	span.End(trace.WithTimestamp(e.end))
}

// traceFacts are the request's facts observeEnd computed once.
type traceFacts struct {
	end                time.Time
	status             int
	code               string
	ttft               time.Duration
	metered            bool
	prompt, completion int
}

func stepOutcome(s ladder.Step) string {
	if s.Hit {
		return outcomeHit
	}
	return outcomeMiss
}

// genAIOperation is the GenAI operation name of a generation path.
func genAIOperation(path string) string {
	switch {
	case strings.HasSuffix(path, "/chat/completions"), strings.HasSuffix(path, "/messages"), strings.HasSuffix(path, "/responses"):
		return "chat"
	case strings.HasSuffix(path, "/completions"):
		return "text_completion"
	case strings.HasSuffix(path, "/embeddings"):
		return "embeddings"
	}
	return ""
}

// tracedSender gives every engine request its own client span, a child of
// the request's span, and sends the engine a traceparent naming that span.
// Requests whose context holds no recording span go through untouched.
type tracedSender struct {
	next upstream.Sender
	t    *tracing.Tracer
}

// traceSender wraps s when tracing is on.
func (rt *Runtime) traceSender(s upstream.Sender) upstream.Sender {
	if rt.tracer == nil {
		return s
	}
	return tracedSender{next: s, t: rt.tracer}
}

// Send implements upstream.Sender.
func (s tracedSender) Send(ctx context.Context, leg upstream.Leg) (*http.Response, error) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return s.next.Send(ctx, leg)
	}
	phase := legPhase(leg.Endpoint.Role)
	path := leg.Path
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i] // the query is client input: never recorded
	}
	start := time.Now()
	sctx, span := s.t.Start(ctx, "engine "+phase, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String(tracing.AttrPhase, phase), attribute.String(tracing.AttrServerAddress, leg.Endpoint.ID),
			attribute.String(tracing.AttrURLPath, path)))
	// The header is shared by a request's concurrent legs (and its retries):
	// each leg sends its own copy naming its own span.
	leg.Header = leg.Header.Clone()
	leg.List.SetInto(leg.Header)
	s.t.Inject(sctx, leg.Header)
	leg.List = upstream.HeadList{} // it lacks the propagation fields
	resp, err := s.next.Send(ctx, leg)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "no response")
		span.End()
		return resp, err
	}
	span.SetAttributes(attribute.Int(tracing.AttrHTTPStatus, resp.StatusCode),
		attribute.Float64(tracing.AttrLegFirstByteMS, float64(time.Since(start).Microseconds())/1e3))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, resp.Status)
	}
	sb := &spanBody{ReadCloser: resp.Body, span: span}
	if bb, ok := resp.Body.(upstream.BoundedBody); ok {
		resp.Body = boundedSpanBody{spanBody: sb, bb: bb}
	} else {
		resp.Body = sb
	}
	return resp, nil
}

func legPhase(r spec.Role) string {
	switch r {
	case spec.RolePrefill:
		return "prefill"
	case spec.RoleDecode:
		return "decode"
	}
	return "serve"
}

// spanBody ends the leg's span when the engine's body is closed, so the
// span covers the whole answer.
type spanBody struct {
	io.ReadCloser
	span trace.Span
	once sync.Once
}

func (b *spanBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.span.End() })
	return err
}

// boundedSpanBody keeps the transport's read deadlines reachable through
// the wrapper (the relay moves them forward as bytes arrive).
type boundedSpanBody struct {
	*spanBody
	bb upstream.BoundedBody
}

func (b boundedSpanBody) Buffered() bool              { return b.bb.Buffered() }
func (b boundedSpanBody) SetReadDeadline(t time.Time) { b.bb.SetReadDeadline(t) }

// Stream keeps the transport's in-wait relay reachable through the
// wrapper (relaystream.go); false when the body has none.
func (b boundedSpanBody) Stream(s upstream.StreamSink) (bool, error) {
	if st, ok := b.bb.(upstream.Streamer); ok {
		return st.Stream(s)
	}
	return false, nil
}
