package accesslog

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// encoderCases are entries whose every field the two paths must render
// alike: plain facts, text that must be quoted or escaped, and the limits.
func encoderCases() []Entry {
	start := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 5*3600+1800))
	legs := Legs{{Phase: "prefill", Endpoint: "10.0.0.2:8000", Status: 200, MS: 12.5}, {Phase: "decode", Endpoint: "[fd00::3]:8000", MS: 0.0000004}}
	return []Entry{
		{Start: start, RequestID: "cbad8095490c4899ddcb9c3c6cf0decf", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Rule: "chat",
			VIP: "10.0.0.1:8080", Method: "POST", Path: "/v1/chat/completions", Model: "qwen3-8b", Client: "10.1.1.1", Status: 200,
			Tier: "tier2_load", Endpoint: "10.0.0.3:8000", Prefill: "10.0.0.2:8000", Legs: legs, TTFT: 15 * time.Millisecond,
			Total: 2500 * time.Millisecond, BytesOut: 900, Metered: true, PromptTokens: 10, CompletionTokens: 0},
		{Start: start.UTC(), RequestID: "r", Method: "GET", Path: "/x", Status: 404, Code: "no_matching_rule"},
		{Start: start, Method: "", Path: "", Status: 0},
		{Start: start, RequestID: `quote" back\slash`, Method: "POST", Path: "/a b/<script>&amp;", Model: "m\x00\x1f\b\f\n\r\t\x7f",
			Status: 499, Code: "client_closed", Tier: "rr", Total: 1234567890123 * time.Millisecond, BytesOut: -1},
		{Start: start, RequestID: "ünïcødé ✓", Model: "bad \xff\xfe utf8 \u2028 \u2029 \U0001F600", Path: "/v1/ö", Status: 200,
			TTFT: time.Nanosecond, Total: 999 * time.Hour},
		{Start: start, RequestID: "r", Model: strings.Repeat("é", 100), Status: 200, Legs: Legs{{Phase: "prefill", Endpoint: `a"b`, Status: 503, MS: 1e22}}},
	}
}

// formatterCases are the logger setups the encoder takes over.
func formatterCases() map[string]func() logrus.Formatter {
	return map[string]func() logrus.Formatter{
		"json":          func() logrus.Formatter { return &logrus.JSONFormatter{} },
		"json nano":     func() logrus.Formatter { return &logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano} },
		"json no html":  func() logrus.Formatter { return &logrus.JSONFormatter{DisableHTMLEscape: true} },
		"json no time":  func() logrus.Formatter { return &logrus.JSONFormatter{DisableTimestamp: true} },
		"json odd time": func() logrus.Formatter { return &logrus.JSONFormatter{TimestampFormat: `"<Jan 2>" 15:04`} },
		"text":          func() logrus.Formatter { return &logrus.TextFormatter{} },
		"text no time":  func() logrus.Formatter { return &logrus.TextFormatter{DisableTimestamp: true} },
		"text full time": func() logrus.Formatter {
			return &logrus.TextFormatter{FullTimestamp: true, TimestampFormat: time.StampMicro}
		},
		"text force quote":   func() logrus.Formatter { return &logrus.TextFormatter{ForceQuote: true} },
		"text disable quote": func() logrus.Formatter { return &logrus.TextFormatter{DisableQuote: true} },
		"text quote empty":   func() logrus.Formatter { return &logrus.TextFormatter{QuoteEmptyFields: true} },
		"text no colors":     func() logrus.Formatter { return &logrus.TextFormatter{DisableColors: true} },
	}
}

// baseCases are the fields a logger may carry into every line.
func baseCases() map[string]logrus.Fields {
	return map[string]logrus.Fields{
		"none":      nil,
		"component": {"component": "access"},
		"typed": {"component": "access", "zone": "eu west", "replica": 3, "ratio": 0.25, "up": true,
			"cause": errors.New("a <b>"), "since": 90 * time.Second, "raw": []byte("x y"), "empty": ""},
	}
}

// twoLoggers returns an access logger through the encoder and one through
// logrus, on the same formatter and fields, each to its own buffer.
func twoLoggers(t *testing.T, f func() logrus.Formatter, base logrus.Fields) (direct, viaLogrus *Logger, db, lb *bytes.Buffer) {
	t.Helper()
	mk := func(f logrus.Formatter) (*Logger, *bytes.Buffer) {
		var buf bytes.Buffer
		l := logrus.New()
		l.SetOutput(&buf)
		l.SetFormatter(f)
		var fl logrus.FieldLogger = l
		if base != nil {
			fl = l.WithFields(base)
		}
		return New(unbuffered(), fl, nil), &buf
	}
	direct, db = mk(f())
	viaLogrus, lb = mk(f())
	if direct.enc == nil {
		t.Fatal("the encoder declined a setup it reproduces")
	}
	viaLogrus.enc = nil
	return direct, viaLogrus, db, lb
}

// TestEncoderMatchesLogrus: for every formatter setup the encoder takes,
// its line is byte for byte logrus's line.
func TestEncoderMatchesLogrus(t *testing.T) {
	for fname, f := range formatterCases() {
		for bname, base := range baseCases() {
			t.Run(fname+"/"+bname, func(t *testing.T) {
				direct, viaLogrus, db, lb := twoLoggers(t, f, base)
				for i, e := range encoderCases() {
					db.Reset()
					lb.Reset()
					direct.Log(&e)
					viaLogrus.Log(&e)
					if db.String() != lb.String() {
						t.Errorf("entry %d:\ndirect %s logrus %s", i, db.String(), lb.String())
					}
				}
			})
		}
	}
}

// FuzzEncoderMatchesLogrus: any text in the client-influenced fields is
// written as logrus writes it, in JSON and in text.
func FuzzEncoderMatchesLogrus(f *testing.F) {
	f.Add("rid", "/v1/completions", "model", "10.0.0.3:8000", int64(1500))
	f.Add("\xff\"\\", "/<&>\u2028", "\x00\x1f", "", int64(-3))
	f.Fuzz(func(t *testing.T, rid, path, model, endpoint string, us int64) {
		e := Entry{Start: time.Unix(1700000000, 0), RequestID: rid, Method: "POST", Path: path, Model: model,
			Endpoint: endpoint, Status: 200, TTFT: time.Duration(us) * time.Microsecond, Total: time.Duration(us) * time.Millisecond,
			Legs: Legs{{Phase: "decode", Endpoint: endpoint, Status: 200, MS: float64(us) / 7}}}
		for _, fname := range []string{"json", "text"} {
			direct, viaLogrus, db, lb := twoLoggers(t, formatterCases()[fname], logrus.Fields{"component": "access"})
			direct.Log(&e)
			viaLogrus.Log(&e)
			if db.String() != lb.String() {
				t.Fatalf("%s:\ndirect %s logrus %s", fname, db.String(), lb.String())
			}
		}
	})
}

// hook is a logrus hook: lines must reach it, so the encoder stands down.
type hook struct{ fired int }

func (h *hook) Levels() []logrus.Level   { return logrus.AllLevels }
func (h *hook) Fire(*logrus.Entry) error { h.fired++; return nil }

// TestEncoderDeclines: setups only logrus renders (hooks, caller reports,
// renamed or nested keys, pretty JSON, colours, sorting functions, another
// formatter, a field a line would override) keep the logrus path, and the
// line is still written.
func TestEncoderDeclines(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*logrus.Logger) logrus.FieldLogger
	}{
		{"hook", func(l *logrus.Logger) logrus.FieldLogger { l.AddHook(&hook{}); return l }},
		{"caller", func(l *logrus.Logger) logrus.FieldLogger { l.SetReportCaller(true); return l }},
		{"field map", func(l *logrus.Logger) logrus.FieldLogger {
			l.SetFormatter(&logrus.JSONFormatter{FieldMap: logrus.FieldMap{logrus.FieldKeyMsg: "message"}})
			return l
		}},
		{"data key", func(l *logrus.Logger) logrus.FieldLogger {
			l.SetFormatter(&logrus.JSONFormatter{DataKey: "f"})
			return l
		}},
		{"pretty", func(l *logrus.Logger) logrus.FieldLogger {
			l.SetFormatter(&logrus.JSONFormatter{PrettyPrint: true})
			return l
		}},
		{"colors", func(l *logrus.Logger) logrus.FieldLogger {
			l.SetFormatter(&logrus.TextFormatter{ForceColors: true})
			return l
		}},
		{"sorting", func(l *logrus.Logger) logrus.FieldLogger {
			l.SetFormatter(&logrus.TextFormatter{SortingFunc: func([]string) {}})
			return l
		}},
		{"other formatter", func(l *logrus.Logger) logrus.FieldLogger {
			l.SetFormatter(struct{ logrus.Formatter }{&logrus.JSONFormatter{}})
			return l
		}},
		{"clashing field", func(l *logrus.Logger) logrus.FieldLogger { return l.WithField("msg", "x") }},
		{"overridden field", func(l *logrus.Logger) logrus.FieldLogger { return l.WithField("rule", "x") }},
		{"func field", func(l *logrus.Logger) logrus.FieldLogger { return l.WithField("f", func() {}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := logrus.New()
			l.SetOutput(&buf)
			al := New(unbuffered(), tt.setup(l), nil)
			if al.enc != nil {
				t.Fatal("the encoder took a setup only logrus renders")
			}
			al.Log(&Entry{RequestID: "r", Status: 200})
			if !strings.Contains(buf.String(), "r") {
				t.Fatalf("no line through logrus: %q", buf.String())
			}
		})
	}
}

// TestEncoderAllocs: a line through the encoder allocates nothing once its
// buffer is pooled.
func TestEncoderAllocs(t *testing.T) {
	if raceDetector {
		t.Skip("sync.Pool drops buffers under the race detector")
	}
	for _, fname := range []string{"json", "text"} {
		l := logrus.New()
		l.SetOutput(io.Discard)
		l.SetFormatter(formatterCases()[fname]())
		al := New(unbuffered(), l.WithField("component", "access"), nil)
		e := encoderCases()[0]
		if n := testing.AllocsPerRun(100, func() { al.Log(&e) }); n != 0 {
			t.Errorf("%s: %v allocations a line, want 0", fname, n)
		}
	}
}

// TestFNV: the sampling hash is hash/fnv's FNV-1a, so the sampled ids do
// not change with the encoder.
func TestFNV(t *testing.T) {
	for _, s := range []string{"", "a", "cbad8095490c4899ddcb9c3c6cf0decf", "ünï"} {
		h := fnv.New64a()
		_, _ = h.Write([]byte(s))
		if got, want := fnv64a(s), h.Sum64(); got != want {
			t.Errorf("fnv64a(%q) = %x, want %x", s, got, want)
		}
	}
}

// countingWriter takes Writes from many goroutines and checks each is one
// whole JSON line.
type countingWriter struct {
	mu    sync.Mutex
	lines int
	bad   []string
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines++
	if !json.Valid(p) || bytes.Count(p, []byte("\n")) != 1 {
		w.bad = append(w.bad, string(p))
	}
	return len(p), nil
}

// TestEncoderConcurrent: lines written from many requests at once stay
// whole, one per Write, and share the pooled buffers safely.
func TestEncoderConcurrent(t *testing.T) {
	w := &countingWriter{}
	l := logrus.New()
	l.SetOutput(w)
	l.SetFormatter(&logrus.JSONFormatter{})
	al := New(unbuffered(), l.WithField("component", "access"), nil)
	if al.enc == nil {
		t.Fatal("no encoder")
	}
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				e := encoderCases()[(g+i)%len(encoderCases())]
				al.Log(&e)
			}
		})
	}
	wg.Wait()
	if w.lines != workers*each || len(w.bad) > 0 {
		t.Fatalf("%d lines of %d, broken: %q", w.lines, workers*each, w.bad)
	}
}
