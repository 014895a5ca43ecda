// Command otlpsink is the smallest OTLP/HTTP trace receiver: it decodes each
// export sent to /v1/traces and prints every span as one JSON line (name,
// kind, ids, attributes). The docs' tracing example points the gateway at it
// to show what a collector receives, on a machine with no collector
// installed; it keeps nothing and is no collector to deploy.
package main

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// line is what one span prints as.
type line struct {
	Name       string         `json:"name"`
	Kind       string         `json:"kind"`
	TraceID    string         `json:"trace_id"`
	SpanID     string         `json:"span_id"`
	ParentID   string         `json:"parent_span_id,omitempty"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:4318", "listen address (OTLP/HTTP's port is 4318)")
	flag.Parse()
	var mu sync.Mutex // one export's lines stay together
	enc := json.NewEncoder(os.Stdout)
	http.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		req, err := decode(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if err := enc.Encode(lineOf(s)); err != nil {
						log.Printf("otlpsink: write: %v", err)
					}
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	log.Fatal(http.ListenAndServe(*addr, nil))
}

// decode reads one protobuf export request (the OTLP/HTTP exporter's
// default encoding; JSON exports are refused).
func decode(r *http.Request) (*coltracepb.ExportTraceServiceRequest, error) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return nil, fmt.Errorf("content type %q: only application/x-protobuf is decoded", ct)
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, fmt.Errorf("read export: %w", err)
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return nil, fmt.Errorf("decode export: %w", err)
	}
	return &req, nil
}

func lineOf(s *tracepb.Span) line {
	l := line{
		Name:    s.Name,
		Kind:    s.Kind.String(),
		TraceID: hex.EncodeToString(s.TraceId),
		SpanID:  hex.EncodeToString(s.SpanId),
	}
	if len(s.ParentSpanId) > 0 {
		l.ParentID = hex.EncodeToString(s.ParentSpanId)
	}
	if len(s.Attributes) > 0 {
		l.Attributes = make(map[string]any, len(s.Attributes))
		for _, kv := range s.Attributes {
			l.Attributes[kv.Key] = valueOf(kv.Value)
		}
	}
	return l
}

// valueOf is an attribute's value as JSON would show it.
func valueOf(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	default:
		return v.String()
	}
}
