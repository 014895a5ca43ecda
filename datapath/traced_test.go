package datapath

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tracing"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace collector on loopback: it decodes
// each protobuf export request and keeps the spans.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
	paths []string
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.paths = append(rc.paths, r.URL.Path)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *otlpReceiver) byName() map[string][]*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string][]*tracepb.Span{}
	for _, s := range rc.spans {
		out[s.Name] = append(out[s.Name], s)
	}
	return out
}

func spanAttr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
)

// traceparentOf parses a W3C traceparent into its trace and parent ids.
func traceparentOf(t *testing.T, v string) (traceID, parentID string) {
	t.Helper()
	if len(v) != 55 || v[:3] != "00-" {
		t.Fatalf("traceparent %q is not W3C version 00", v)
	}
	return v[3:35], v[36:52]
}

// flushTraces exports the runtime's spans until the request span is in:
// it ends when the handler returns, which a client reading a sized body
// may beat.
func flushTraces(t *testing.T, rt *Runtime, rc *otlpReceiver) {
	t.Helper()
	waitFor(t, 10*time.Second, "the request span", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rt.tracer.ForceFlush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		return len(rc.byName()["gateway POST"]) > 0
	})
}

// TestTracingSinglePool: the client's traceparent is the parent of the
// gateway's request span, the engine gets a traceparent naming the
// gateway's leg span in the same trace, and the spans reach a real OTLP
// receiver with the GenAI attributes.
func TestTracingSinglePool(t *testing.T) {
	rc := startOTLPReceiver(t)
	o := testOptions()
	o.Tracing.Endpoint = rc.srv.URL
	rt, logs := jsonLogRuntime(t, o)
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	res := post(t, testClient(), ruleURL(r)+"/v1/chat/completions", `{"model":"fake-model","stream":true,"messages":[]}`,
		"traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-01")
	if res.status != 200 {
		t.Fatalf("status %d %s", res.status, res.body)
	}
	reqs := e.Requests()
	engineTrace, engineParent := traceparentOf(t, reqs[len(reqs)-1].Header.Get("traceparent"))
	if engineTrace != clientTraceID {
		t.Fatalf("engine trace %s, want the client's %s", engineTrace, clientTraceID)
	}
	flushTraces(t, rt, rc)
	spans := rc.byName()
	if len(spans["gateway POST"]) != 1 || len(spans["engine serve"]) != 1 {
		t.Fatalf("spans %v: want one request span and one engine leg", spans)
	}
	req, leg := spans["gateway POST"][0], spans["engine serve"][0]
	if hex.EncodeToString(req.TraceId) != clientTraceID || hex.EncodeToString(req.ParentSpanId) != clientSpanID {
		t.Errorf("request span in trace %x under %x, want the client's", req.TraceId, req.ParentSpanId)
	}
	if hex.EncodeToString(leg.ParentSpanId) != hex.EncodeToString(req.SpanId) || hex.EncodeToString(leg.SpanId) != engineParent {
		t.Errorf("leg span %x (parent %x): want a child of the request span %x, named in the engine's traceparent (%s)",
			leg.SpanId, leg.ParentSpanId, req.SpanId, engineParent)
	}
	if v := spanAttr(req, tracing.AttrGenAIResponseModel); v.GetStringValue() != "fake-model" {
		t.Errorf("%s = %v", tracing.AttrGenAIResponseModel, v)
	}
	if v := spanAttr(req, tracing.AttrGenAITTFT); v.GetDoubleValue() <= 0 {
		t.Errorf("%s = %v, want > 0", tracing.AttrGenAITTFT, v)
	}
	if v := spanAttr(req, tracing.AttrHTTPStatus); v.GetIntValue() != 200 {
		t.Errorf("status attribute %v", v)
	}
	if v := spanAttr(leg, tracing.AttrServerAddress); v.GetStringValue() != e.Addr() {
		t.Errorf("leg server.address %v, want %s", v, e.Addr())
	}
	if leg.EndTimeUnixNano < leg.StartTimeUnixNano || req.EndTimeUnixNano < leg.EndTimeUnixNano {
		t.Errorf("leg [%d,%d] not inside request [%d,%d]", leg.StartTimeUnixNano, leg.EndTimeUnixNano, req.StartTimeUnixNano, req.EndTimeUnixNano)
	}
	if lines := logs.waitAccessLines(t, 1); len(lines) != 1 || lines[0]["trace_id"] != clientTraceID {
		t.Errorf("access line does not name the trace: %v", lines)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.paths) == 0 || rc.paths[0] != "/v1/traces" {
		t.Errorf("export paths %v, want /v1/traces", rc.paths)
	}
}

// TestTracingListedHead: a client head the front end listed (common
// names only, no traceparent) is traced too; the leg's head is then
// written from a copy of the header map, not the list, and carries the
// fields the list set over the map (X-Forwarded-For, the request id).
func TestTracingListedHead(t *testing.T) {
	rc := startOTLPReceiver(t)
	o := testOptions()
	o.Tracing.Endpoint = rc.srv.URL
	rt, _ := jsonLogRuntime(t, o)
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	res := post(t, testClient(), ruleURL(r)+"/v1/completions", `{"model":"fake-model","prompt":"x"}`)
	if res.status != 200 {
		t.Fatalf("status %d %s", res.status, res.body)
	}
	reqs := e.Requests()
	h := reqs[len(reqs)-1].Header
	if _, parent := traceparentOf(t, h.Get("traceparent")); parent == "" {
		t.Fatal("the engine got no leg span")
	}
	if h.Get("X-Forwarded-For") != "127.0.0.1" || h.Get("X-Request-Id") != res.header.Get("X-Request-Id") {
		t.Errorf("engine X-Forwarded-For %q, X-Request-Id %q: want 127.0.0.1 and the answer's id %q",
			h.Get("X-Forwarded-For"), h.Get("X-Request-Id"), res.header.Get("X-Request-Id"))
	}
}

// TestTracingPD: a P/D request's trace has a span per ladder step and per
// leg, each engine receiving its own leg's span as parent, and the request
// model as gen_ai.request.model.
func TestTracingPD(t *testing.T) {
	for _, engine := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM} {
		t.Run(string(engine), func(t *testing.T) {
			rc := startOTLPReceiver(t)
			o := pdTestOptions()
			o.Tracing.Endpoint = rc.srv.URL
			f := newPDFleet(t, o, engine, 1, 1)
			res := post(t, testClient(), f.url("/v1/completions"), pdBody("/v1/completions", false, ""))
			if res.status != 200 {
				t.Fatalf("status %d %s", res.status, res.body)
			}
			flushTraces(t, f.rt, rc)
			spans := rc.byName()
			reqs := spans["gateway POST"]
			if len(reqs) != 1 {
				t.Fatalf("spans %v: want one request span", spans)
			}
			root := reqs[0]
			if v := spanAttr(root, tracing.AttrGenAIRequestModel); v.GetStringValue() != "fake-model" {
				t.Errorf("%s = %v", tracing.AttrGenAIRequestModel, v)
			}
			if v := spanAttr(root, tracing.AttrTier); v.GetStringValue() == "" {
				t.Errorf("no tier on the request span")
			}
			ladderSpans := 0
			for name, ss := range spans {
				if len(name) > 7 && name[:7] == "ladder " {
					ladderSpans += len(ss)
					for _, s := range ss {
						if string(s.ParentSpanId) != string(root.SpanId) {
							t.Errorf("%s is not a child of the request span", name)
						}
					}
				}
			}
			if ladderSpans == 0 {
				t.Errorf("no ladder step spans in %v", spans)
			}
			for _, k := range []string{"prefill", "decode"} {
				legs := spans["engine "+k]
				if len(legs) != 1 || string(legs[0].ParentSpanId) != string(root.SpanId) {
					t.Fatalf("engine %s spans %v: want one child of the request span", k, legs)
				}
				var rec []string
				eng := f.prefills[0]
				if k == "decode" {
					eng = f.decodes[0]
				}
				for _, r := range eng.Records() {
					if tp := r.Header.Get("traceparent"); tp != "" {
						rec = append(rec, tp)
					}
				}
				if len(rec) == 0 {
					t.Fatalf("the %s engine got no traceparent", k)
				}
				tid, parent := traceparentOf(t, rec[len(rec)-1])
				if tid != hex.EncodeToString(root.TraceId) || parent != hex.EncodeToString(legs[0].SpanId) {
					t.Errorf("%s engine traceparent %s, want trace %x under its leg span %x", k, rec[len(rec)-1], root.TraceId, legs[0].SpanId)
				}
			}
		})
	}
}

// TestTracingOffLeavesTraceparent: without an OTLP endpoint the client's
// traceparent reaches the engine unchanged and nothing is traced.
func TestTracingOffLeavesTraceparent(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	if rt.tracer != nil {
		t.Fatal("tracing on without an endpoint")
	}
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	tp := "00-" + clientTraceID + "-" + clientSpanID + "-01"
	post(t, testClient(), ruleURL(r)+"/v1/completions", completionBody, "traceparent", tp)
	reqs := e.Requests()
	if got := reqs[len(reqs)-1].Header.Get("traceparent"); got != tp {
		t.Fatalf("engine traceparent %q, want the client's %q", got, tp)
	}
}
