package accesslog

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"slices"
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

// hostileCases are values a client or an odd setup may put in a line,
// each in the fields it can reach, and durations at the edges of the
// encoder's integer way of writing milliseconds.
func hostileCases() []struct {
	name string
	e    Entry
} {
	start := time.Date(2026, 12, 3, 17, 0, 0, 999999999, time.UTC)
	text := func(v string) Entry {
		return Entry{Start: start, RequestID: v, Rule: v, VIP: v, Method: v, Path: v, Model: v, Client: v,
			Status: 200, Code: v, Tier: v, Endpoint: v, Prefill: v, TraceID: v,
			Legs: Legs{{Phase: v, Endpoint: v, Status: 200, MS: 1}}}
	}
	dur := func(ttft, total time.Duration) Entry {
		return Entry{Start: start, RequestID: "r", Method: "POST", Path: "/v1/completions", Status: 200, TTFT: ttft, Total: total}
	}
	return []struct {
		name string
		e    Entry
	}{
		{"empty", text("")},
		{"plain", text("cbad8095490c4899ddcb9c3c6cf0decf")},
		{"every safe byte", text("azAZ09-._/@^+")},
		{"address", text("10.0.0.3:8000")},
		{"ipv6 address", text("[fd00::3]:8000")},
		{"space", text("a b")},
		{"equals", text("a=b")},
		{"quote", text(`a"b`)},
		{"backslash", text(`a\b`)},
		{"quote and backslash only", text(`"\`)},
		{"html", text("<a href='x'>&amp;</a>")},
		{"control bytes", text("\x00\x01\a\b\t\n\v\f\r\x1b\x1f\x7f")},
		{"utf-8", text("ünïcødé ✓ 日本語 \U0001F600")},
		{"invalid utf-8", text("a\xff\xfeb\xc3(\xe2\x82\xf0\x90\x80")},
		{"line separators", text("a\u2028b\u2029c\u0085d")},
		{"non-printable runes", text("\u00ad\u200b\ufeff\U000e0001")},
		{"eight bytes", text("abcdefgh")},
		{"nine bytes, last quoted", text("abcdefgh:")},
		{"very long", text(strings.Repeat("abcdefghij/", 1000) + " ")},
		{"very long plain", text(strings.Repeat("x", 70000))},
		{"zero durations", dur(0, 0)},
		{"sub-microsecond", dur(499, 500)},
		{"rounding up to a millisecond", dur(999_999_500, 999_500)},
		{"trailing zeros", dur(1_200_000, 1_020_000)},
		{"no zeros", dur(1_234_567, 7_654_321)},
		{"text exponent edge", dur(999_999_999_499, 999_999_999_500)},
		{"a million ms", dur(1_000_000*time.Millisecond, 1_000_001*time.Millisecond)},
		{"json exponent edge", dur(999_999_999_999_999_000, time.Duration(1<<63-1))},
		{"exact integer edge", dur(exactNS-1, exactNS)},
		{"negative", dur(-1, -1_500_000)},
		{"tiny negative", dur(-499, -1)},
	}
}

// TestEncoderHostileValues: values that must be quoted or escaped, and
// durations at the edges, are written as logrus writes them, in every
// setup the encoder takes.
func TestEncoderHostileValues(t *testing.T) {
	for fname, f := range formatterCases() {
		for bname, base := range baseCases() {
			t.Run(fname+"/"+bname, func(t *testing.T) {
				direct, viaLogrus, db, lb := twoLoggers(t, f, base)
				for _, tc := range hostileCases() {
					db.Reset()
					lb.Reset()
					direct.Log(&tc.e)
					viaLogrus.Log(&tc.e)
					if db.String() != lb.String() {
						t.Errorf("%s:\ndirect %s logrus %s", tc.name, db.String(), lb.String())
					}
				}
			})
		}
	}
}

// TestEncoderTimes: lines of one second share its rendered time, and a
// line of another second or another location gets its own.
func TestEncoderTimes(t *testing.T) {
	base := time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)
	east := time.FixedZone("east", 5*3600+1800)
	times := []time.Time{
		base, base.Add(999 * time.Millisecond), base.Add(time.Second), base.Add(time.Second).In(east),
		base.Add(time.Second), base.Add(-time.Nanosecond), base.Local(), {}, base.Add(24 * time.Hour),
	}
	for _, fname := range []string{"text", "json", "json nano", "text full time"} {
		t.Run(fname, func(t *testing.T) {
			direct, viaLogrus, db, lb := twoLoggers(t, formatterCases()[fname], nil)
			for i, at := range times {
				db.Reset()
				lb.Reset()
				e := Entry{Start: at, RequestID: "r", Status: 200}
				direct.Log(&e)
				viaLogrus.Log(&e)
				if at.IsZero() { // stamped now: compare all but the time
					continue
				}
				if db.String() != lb.String() {
					t.Errorf("time %d (%v):\ndirect %s logrus %s", i, at, db.String(), lb.String())
				}
			}
		})
	}
}

// FuzzEncoderMatchesLogrus: any text in the client- and config-influenced
// fields, and any durations, are written as logrus writes them, in JSON
// and in text.
func FuzzEncoderMatchesLogrus(f *testing.F) {
	f.Add("rid", "/v1/completions", "model", "10.0.0.3:8000", "chat", int64(1500), int64(1_234_567))
	f.Add("\xff\"\\", "/<&>\u2028", "\x00\x1f", "", "a b=c", int64(-3), int64(999_999_999_500))
	f.Add("abcdefgh", "abcdefgh:", "ünï", "[fd00::3]:8000", "", int64(0), int64(1<<62))
	f.Fuzz(func(t *testing.T, rid, path, model, endpoint, other string, ttft, total int64) {
		e := Entry{Start: time.Unix(1700000000, ttft), RequestID: rid, Method: "POST", Path: path, Model: model,
			Endpoint: endpoint, Rule: other, VIP: other, Client: other, Tier: other, Code: other, Status: 200,
			TTFT: time.Duration(ttft), Total: time.Duration(total),
			Legs: Legs{{Phase: "decode", Endpoint: endpoint, Status: 200, MS: float64(ttft) / 7}}}
		for _, fname := range []string{"json", "text", "json no html", "text quote empty"} {
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

// TestCompileOrder: the encoder takes only a layout whose fields come in
// the order its line writes them; any other (a renamed key would make
// one) leaves the line to logrus.
func TestCompileOrder(t *testing.T) {
	keyed := func(ids ...fieldID) []slot {
		var slots []slot
		for _, id := range ids {
			slots = append(slots, slot{key: []byte("k="), id: id})
		}
		return slots
	}
	all := lineOrder[:]
	noTime := slices.DeleteFunc(slices.Clone(all), func(id fieldID) bool { return id == fTime })
	swapped := slices.Clone(noTime)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	tests := []struct {
		name  string
		enc   *encoder
		slots []slot
		want  bool
	}{
		{"json, sorted", &encoder{json: true, timeFmt: time.RFC3339}, keyed(all...), true},
		{"json without time", &encoder{json: true}, keyed(noTime...), true},
		{"text, time first", &encoder{timeFmt: time.RFC3339}, keyed(append([]fieldID{fTime, fLevel, fMsg}, noTime...)...), true},
		{"text without time", &encoder{}, keyed(append([]fieldID{fLevel, fMsg}, noTime...)...), true},
		{"text, time sorted", &encoder{timeFmt: time.RFC3339}, keyed(all...), false},
		{"two swapped", &encoder{}, keyed(swapped...), false},
		{"one missing", &encoder{}, keyed(noTime[1:]...), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.enc.compile(tt.slots); got != tt.want {
				t.Fatalf("compile = %v, want %v", got, tt.want)
			}
		})
	}
}
