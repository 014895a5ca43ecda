package tracing

import (
	"context"
	"net/http"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"off", DefaultOptions(), true},
		{"http", Options{Endpoint: "http://127.0.0.1:4318", SampleRatio: 1}, true},
		{"https with path", Options{Endpoint: "https://otel.example/v1/traces", SampleRatio: 0.5}, true},
		{"no scheme", Options{Endpoint: "127.0.0.1:4318", SampleRatio: 1}, false},
		{"grpc scheme", Options{Endpoint: "grpc://127.0.0.1:4317", SampleRatio: 1}, false},
		{"ratio above 1", Options{Endpoint: "http://127.0.0.1:4318", SampleRatio: 2}, false},
		{"negative ratio", Options{Endpoint: "http://127.0.0.1:4318", SampleRatio: -0.1}, false},
	}
	for _, tt := range tests {
		if err := tt.o.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestTracesURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"},
		{"http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"},
		{"https://c.example/custom/path", "https://c.example/custom/path"},
	}
	for _, tt := range tests {
		if got := (Options{Endpoint: tt.in}).tracesURL(); got != tt.want {
			t.Errorf("tracesURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestNilTracerIsInert: tracing off is a nil *Tracer every method accepts.
func TestNilTracerIsInert(t *testing.T) {
	tr, err := New(DefaultOptions(), "v")
	if err != nil || tr != nil {
		t.Fatalf("New(off) = %v, %v; want nil, nil", tr, err)
	}
	h := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	ctx, span := tr.StartRequest(context.Background(), h, "x", time.Now())
	if span.IsRecording() {
		t.Fatal("a nil tracer recorded a span")
	}
	tr.Inject(ctx, h)
	if h.Get("Traceparent") != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("a nil tracer changed the traceparent: %q", h.Get("Traceparent"))
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
