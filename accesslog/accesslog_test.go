package accesslog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

func jsonLogger(level logrus.Level) (*logrus.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	l.SetFormatter(&logrus.JSONFormatter{})
	l.SetLevel(level)
	return l, &buf
}

// TestLineFields: a P/D request's line carries every fact as its own JSON
// field, with the arrival as its time.
func TestLineFields(t *testing.T) {
	l, buf := jsonLogger(logrus.InfoLevel)
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	New(unbuffered(), l.WithField("component", "datapath"), nil).Log(&Entry{
		Start: start, RequestID: "rid-1", Rule: "chat", VIP: "10.0.0.1:8080", Method: "POST",
		Path: "/v1/chat/completions", Model: "m", Client: "10.1.1.1", Status: 200, Tier: "tier1_prefix",
		Endpoint: "10.0.0.3:8000", Prefill: "10.0.0.2:8000",
		Legs: Legs{{Phase: "prefill", Endpoint: "10.0.0.2:8000", Status: 200, MS: 12.5}, {Phase: "decode", Endpoint: "10.0.0.3:8000", Status: 200, MS: 3}},
		TTFT: 15 * time.Millisecond, Total: 2500 * time.Millisecond, BytesOut: 900,
		Metered: true, PromptTokens: 10, CompletionTokens: 20,
	})
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("line %q: %v", buf.String(), err)
	}
	want := map[string]any{
		"msg": Message, "time": "2026-01-02T03:04:05Z", "level": "info", "component": "datapath",
		"request_id": "rid-1", "rule": "chat", "vip": "10.0.0.1:8080", "method": "POST", "path": "/v1/chat/completions",
		"model": "m", "client": "10.1.1.1", "status": 200.0, "tier": "tier1_prefix", "endpoint": "10.0.0.3:8000",
		"prefill": "10.0.0.2:8000", "ttft_ms": 15.0, "duration_ms": 2500.0, "bytes_out": 900.0,
		"prompt_tokens": 10.0, "completion_tokens": 20.0,
		"legs": []any{
			map[string]any{"phase": "prefill", "endpoint": "10.0.0.2:8000", "status": 200.0, "ms": 12.5},
			map[string]any{"phase": "decode", "endpoint": "10.0.0.3:8000", "status": 200.0, "ms": 3.0},
		},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("line\n got %v\nwant %v", got, want)
	}
}

// TestLineOmitsUnknowns: facts a request does not have are left out, not
// written empty (a refused request has no endpoint, tier or tokens).
func TestLineOmitsUnknowns(t *testing.T) {
	l, buf := jsonLogger(logrus.InfoLevel)
	New(unbuffered(), l, nil).Log(&Entry{RequestID: "r", Method: "GET", Path: "/x", Status: 404, Code: "no_matching_rule"})
	for _, k := range []string{"rule", "tier", "endpoint", "prefill", "legs", "ttft_ms", "prompt_tokens", "model"} {
		if strings.Contains(buf.String(), `"`+k+`"`) {
			t.Errorf("line has %q: %s", k, buf.String())
		}
	}
	if !strings.Contains(buf.String(), `"error":"no_matching_rule"`) {
		t.Errorf("line lacks the error code: %s", buf.String())
	}
}

// TestTextLegs: in text logs the legs are one readable field.
func TestTextLegs(t *testing.T) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	l.SetFormatter(&logrus.TextFormatter{DisableTimestamp: true})
	New(unbuffered(), l, nil).Log(&Entry{RequestID: "r", Status: 200, Legs: Legs{{Phase: "prefill", Endpoint: "a:1", Status: 200, MS: 1.5}, {Phase: "decode", Endpoint: "b:2", MS: 2}}})
	if want := `legs="prefill@a:1:200/1.500ms decode@b:2:0/2.000ms"`; !strings.Contains(buf.String(), want) {
		t.Fatalf("text line %q lacks %s", buf.String(), want)
	}
}

// TestSampling: the sampled share follows the rate, failures are always
// logged, the choice depends only on the request id, and a disabled log or
// a level above info writes nothing.
func TestSampling(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		level   logrus.Level
		status  int
		code    string
		wantMin int // of 1000 distinct ids
		wantMax int
	}{
		{"default logs all", unbuffered(), logrus.InfoLevel, 200, "", 1000, 1000},
		{"tenth of successes", Options{Enabled: true, SampleRate: 0.1}, logrus.InfoLevel, 200, "", 60, 140},
		{"rate 0 keeps no success", Options{Enabled: true}, logrus.InfoLevel, 200, "", 0, 0},
		{"rate 0 keeps engine errors", Options{Enabled: true}, logrus.InfoLevel, 500, "", 1000, 1000},
		{"rate 0 keeps gateway errors", Options{Enabled: true}, logrus.InfoLevel, 200, "stream_capped", 1000, 1000},
		{"disabled", Options{SampleRate: 1}, logrus.InfoLevel, 500, "", 0, 0},
		{"warn level", DefaultOptions(), logrus.WarnLevel, 500, "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, buf := jsonLogger(tt.level)
			al := New(tt.opts, l, nil)
			for i := range 1000 {
				al.Log(&Entry{RequestID: fmt.Sprintf("%032x", i*7919), Status: tt.status, Code: tt.code})
			}
			n := strings.Count(buf.String(), "\n")
			if n < tt.wantMin || n > tt.wantMax {
				t.Fatalf("%d lines of 1000, want %d..%d", n, tt.wantMin, tt.wantMax)
			}
		})
	}
	al := New(Options{Enabled: true, SampleRate: 0.5}, logrus.New(), nil)
	for i := range 100 {
		e := &Entry{RequestID: fmt.Sprint(i), Status: 200}
		if al.Sampled(e) != al.Sampled(&Entry{RequestID: fmt.Sprint(i), Status: 204}) {
			t.Fatalf("id %d sampled differently across calls", i)
		}
	}
}

// TestModelBounded: a client's model name is cut at maxModel bytes.
func TestModelBounded(t *testing.T) {
	l, buf := jsonLogger(logrus.InfoLevel)
	New(unbuffered(), l, nil).Log(&Entry{RequestID: "r", Status: 200, Model: strings.Repeat("m", 1000)})
	if strings.Count(buf.String(), "m") > maxModel+5 {
		t.Fatalf("model not bounded: %d bytes", len(buf.String()))
	}
}

// BenchmarkLog is the cost of one access line (JSON and text, to a discarding
// writer): what every request pays with the default options, through the
// encoder and, in the same run, through logrus (the …/logrus cases).
func BenchmarkLog(b *testing.B) {
	for _, f := range []struct {
		name   string
		f      logrus.Formatter
		logrus bool
	}{
		{"json", &logrus.JSONFormatter{}, false}, {"text", &logrus.TextFormatter{}, false},
		{"json/logrus", &logrus.JSONFormatter{}, true}, {"text/logrus", &logrus.TextFormatter{}, true},
	} {
		b.Run(f.name, func(b *testing.B) {
			l := logrus.New()
			l.SetOutput(io.Discard)
			l.SetFormatter(f.f)
			al := New(unbuffered(), l.WithField("component", "access"), nil)
			if f.logrus {
				al.enc = nil
			}
			e := &Entry{Start: time.Now(), RequestID: "cbad8095490c4899ddcb9c3c6cf0decf", Rule: "chat", VIP: "10.0.0.1:8080",
				Method: "POST", Path: "/v1/chat/completions", Model: "m", Client: "10.1.1.1", Status: 200, Tier: "tier2_load",
				Endpoint: "10.0.0.3:8000", Prefill: "10.0.0.2:8000", TTFT: 15 * time.Millisecond, Total: time.Second, BytesOut: 900,
				Legs: Legs{{Phase: "prefill", Endpoint: "10.0.0.2:8000", Status: 200, MS: 12.5}, {Phase: "decode", Endpoint: "10.0.0.3:8000", Status: 200, MS: 3}}}
			b.ReportAllocs()
			for b.Loop() {
				al.Log(e)
			}
		})
	}
}

// TestWriting: the datapath gathers an entry only when a line can come of
// it: a logger that exists and admits info, whatever the sampling.
func TestWriting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		enabled bool
		level   logrus.Level
		rate    float64
		want    bool
	}{
		{"info", true, logrus.InfoLevel, 1, true},
		{"debug", true, logrus.DebugLevel, 1, true},
		{"warn", true, logrus.WarnLevel, 1, false},
		{"disabled", false, logrus.InfoLevel, 1, false},
		{"sampled at info", true, logrus.InfoLevel, 0.1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, buf := jsonLogger(tc.level)
			o := unbuffered()
			o.Enabled, o.SampleRate = tc.enabled, tc.rate
			al := New(o, l, nil)
			if got := al.Writing(); got != tc.want {
				t.Fatalf("Writing() = %v, want %v", got, tc.want)
			}
			al.Log(&Entry{RequestID: "rid", Status: 500, Method: "POST", Path: "/v1/completions"})
			if wrote := buf.Len() > 0; wrote != tc.want {
				t.Fatalf("a failed request's line written = %v, want %v (Writing must agree with Log)", wrote, tc.want)
			}
		})
	}
}

// unbuffered is the default options with a Write per line, so a test
// reads a line as soon as Log returns.
func unbuffered() Options {
	o := DefaultOptions()
	o.BufferBytes = 0
	return o
}

// BenchmarkLogSingle is the line of a small single-pool request, as the
// daemon writes one per request by default (text, the entry test/bench/
// irpr.sh's requests make), unbuffered and buffered, to a discarding
// writer.
func BenchmarkLogSingle(b *testing.B) {
	for _, f := range []struct {
		name   string
		f      logrus.Formatter
		buffer int
	}{
		{"text", &logrus.TextFormatter{}, 0}, {"json", &logrus.JSONFormatter{}, 0},
		{"text-buffered", &logrus.TextFormatter{}, DefaultOptions().BufferBytes},
	} {
		b.Run(f.name, func(b *testing.B) {
			l := logrus.New()
			l.SetOutput(io.Discard)
			l.SetFormatter(f.f)
			o := DefaultOptions()
			o.BufferBytes = f.buffer
			al := New(o, l.WithField("component", "access"), nil)
			defer func() { _ = al.Close(b.Context()) }()
			e := &Entry{Start: time.Now(), RequestID: "cbad8095490c4899ddcb9c3c6cf0decf", Rule: "irpr", VIP: "127.0.6.1:36710",
				Method: "POST", Path: "/v1/completions", Model: "fake-model", Client: "127.0.6.1", Status: 200, Tier: "rr",
				Endpoint: "127.0.6.1:36800", TTFT: 1234567, Total: 1345678, BytesOut: 312}
			b.ReportAllocs()
			for b.Loop() {
				al.Log(e)
			}
		})
	}
}
