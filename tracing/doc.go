// Package tracing exports the gateway's OpenTelemetry traces over OTLP/HTTP
// and carries W3C trace context across it: a client's traceparent becomes
// the parent of the gateway's request span, and every request to an engine
// carries a traceparent naming the gateway's span for that leg, so an
// engine's own trace (vLLM and SGLang export OTLP) joins the gateway's.
//
// Tracing is off unless an OTLP endpoint is configured; a nil *Tracer is a
// valid, inert tracer, so the datapath pays nothing when it is off.
//
// It uses the OpenTelemetry Go SDK rather than a hand-rolled exporter: the
// OTLP wire format, batching, retry and the W3C propagation rules are what
// collectors and engines already agree on, and the SDK is the reference
// implementation of them (it is already in the module graph through etcd's
// and gRPC's instrumentation).
package tracing
