package tracing

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Attribute names of the OpenTelemetry GenAI and HTTP semantic conventions
// the gateway sets, and its own.
const (
	AttrGenAIRequestModel  = "gen_ai.request.model"
	AttrGenAIResponseModel = "gen_ai.response.model"
	AttrGenAIOperation     = "gen_ai.operation.name"
	AttrGenAIInputTokens   = "gen_ai.usage.input_tokens"
	AttrGenAIOutputTokens  = "gen_ai.usage.output_tokens"
	// AttrGenAITTFT is the client's time to first token in seconds (the
	// conventions name the measure gen_ai.server.time_to_first_token).
	AttrGenAITTFT      = "gen_ai.server.time_to_first_token"
	AttrHTTPMethod     = "http.request.method"
	AttrHTTPStatus     = "http.response.status_code"
	AttrURLPath        = "url.path"
	AttrServerAddress  = "server.address"
	AttrRule           = "infergate.rule"
	AttrRequestID      = "infergate.request_id"
	AttrError          = "infergate.error"
	AttrTier           = "infergate.tier"
	AttrTierOutcome    = "infergate.tier.outcome"
	AttrTierReason     = "infergate.tier.reason"
	AttrEndpoint       = "infergate.endpoint"
	AttrPhase          = "infergate.phase"
	AttrLegFirstByteMS = "infergate.leg.first_byte_ms"
)

// Tracer starts the gateway's spans and carries trace context. A nil
// *Tracer does nothing.
type Tracer struct {
	tp   *sdktrace.TracerProvider
	tr   trace.Tracer
	prop propagation.TextMapPropagator
}

// New builds the tracer exporting to opts.Endpoint; nil when tracing is off.
// version is the service.version resource attribute.
func New(opts Options, version string) (*Tracer, error) {
	if opts.Endpoint == "" {
		return nil, nil
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(opts.tracesURL()))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	name := opts.ServiceName
	if name == "" {
		name = DefaultOptions().ServiceName
	}
	res := resource.NewSchemaless(attribute.String("service.name", name), attribute.String("service.version", version))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SampleRatio))),
	)
	return &Tracer{
		tp:   tp,
		tr:   tp.Tracer("github.com/infergate/infergate"),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}, nil
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// ForceFlush exports the spans buffered so far.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// StartRequest starts a request's server span at start, as a child of the
// trace context the client sent in h (traceparent, tracestate), if any.
func (t *Tracer) StartRequest(ctx context.Context, h http.Header, name string, start time.Time) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	ctx = t.prop.Extract(ctx, propagation.HeaderCarrier(h))
	return t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
}

// Start starts a child span of the span in ctx.
func (t *Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.tr.Start(ctx, name, opts...)
}

// Inject writes ctx's span as the traceparent (and tracestate, baggage) of
// an outgoing request's header h, replacing what the client sent.
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}
