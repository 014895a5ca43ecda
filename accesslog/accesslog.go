package accesslog

import (
	"context"
	"math"
	"time"

	"github.com/sirupsen/logrus"
)

// Message is the log message of every access line (filter on it).
const Message = "access"

// maxModel bounds the model name written: it is client input.
const maxModel = 128

// Entry is what one request's line is made of. The datapath fills it along
// the request path; nothing in it is request or response content.
type Entry struct {
	Start     time.Time // arrival; the line's time
	RequestID string
	TraceID   string // the gateway's trace when the request was traced
	Rule      string // the rule's metrics label; "" when no rule matched
	VIP       string // the address the request arrived on, ip:port
	Method    string
	Path      string // the URL path; the query is never written
	Model     string // the request's model when the gateway read it or the engine named it
	Client    string // the client's IP address
	Status    int
	Code      string // the infergate error code; "" when the engine's answer passed through
	Tier      string // what chose the endpoint (a ladder tier, a sel mode)
	Endpoint  string // the endpoint that answered (the decode on P/D rules)
	Prefill   string // the prefill endpoint of a P/D request
	Legs      Legs   // P/D legs in the order they were sent
	TTFT      time.Duration
	Total     time.Duration
	BytesOut  int64
	// Tokens the engine reported in its usage (metered rules only).
	Metered          bool
	PromptTokens     int
	CompletionTokens int
}

// Leg is one upstream leg of a P/D request.
type Leg struct {
	Phase    string  `json:"phase"`
	Endpoint string  `json:"endpoint"`
	Status   int     `json:"status"` // 0: no answer
	MS       float64 `json:"ms"`     // prefill: to the complete answer; decode: to the first byte
}

// Legs renders as a short list in text logs and as objects in JSON logs.
type Legs []Leg

func (ls Legs) String() string { return string(ls.appendText(nil)) }

// Logger writes access lines. A nil *Logger logs nothing.
type Logger struct {
	log logrus.FieldLogger
	// enc writes lines without logrus (encode.go); nil when the logger's
	// setup is one only logrus renders.
	enc *encoder
	// threshold: a request whose id hashes below it is sampled (all when
	// every is set).
	threshold uint64
	every     bool
}

// New returns the access logger, or nil when opts disable it. dropped
// counts the lines a stalled output made it drop (nil: not counted); Close
// writes what is buffered.
func New(opts Options, log logrus.FieldLogger, dropped Counter) *Logger {
	if !opts.Enabled || log == nil {
		return nil
	}
	l := &Logger{log: log, enc: newEncoder(log)}
	if l.enc != nil && opts.BufferBytes > 0 {
		every := opts.FlushEvery
		if every <= 0 {
			every = DefaultOptions().FlushEvery
		}
		l.enc.buf = newBufWriter(l.enc.out, opts.BufferBytes, every, dropped)
	}
	switch r := opts.SampleRate; {
	case r >= 1:
		l.every = true
	case r > 0:
		l.threshold = uint64(r * math.MaxUint64)
	}
	return l
}

// Close writes the lines still buffered and stops the flush timer,
// waiting for the output up to ctx; lines logged after it are written one
// at a time. Unbuffered and nil loggers have nothing to close.
func (l *Logger) Close(ctx context.Context) error {
	if l == nil || l.enc == nil || l.enc.buf == nil {
		return nil
	}
	return l.enc.buf.Close(ctx)
}

// Sampled reports whether e is logged: every failed request (status 400 or
// more, or a gateway error code), and successful ones whose request id falls
// in the sampled fraction. The choice depends on the id alone, so replicas
// and traces agree on it.
func (l *Logger) Sampled(e *Entry) bool {
	if l == nil {
		return false
	}
	if l.every || e.Status >= 400 || e.Code != "" {
		return true
	}
	return fnv64a(e.RequestID) < l.threshold
}

// fnv64a is FNV-1a (hash/fnv's New64a) over s, without a hasher to
// allocate.
func fnv64a(s string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= prime
	}
	return h
}

// Writing reports whether l writes lines at all now (it exists and its
// logger admits info), so a caller can skip gathering an entry that Log
// would drop: a daemon run at --log-level warn builds none.
func (l *Logger) Writing() bool {
	return l != nil && infoEnabled(l.log)
}

// Log writes e when it is sampled and the logger admits info.
func (l *Logger) Log(e *Entry) {
	if !l.Sampled(e) || !infoEnabled(l.log) {
		return
	}
	if l.enc != nil {
		l.enc.write(e)
		return
	}
	l.logrusLine(e)
}

// logrusLine writes e through logrus: the line the encoder reproduces, and
// the path for logger setups it does not.
func (l *Logger) logrusLine(e *Entry) {
	f := logrus.Fields{
		"request_id":  e.RequestID,
		"method":      e.Method,
		"path":        e.Path,
		"status":      e.Status,
		"duration_ms": ms(e.Total),
		"bytes_out":   e.BytesOut,
	}
	put := func(k, v string) {
		if v != "" {
			f[k] = v
		}
	}
	put("trace_id", e.TraceID)
	put("rule", e.Rule)
	put("vip", e.VIP)
	put("client", e.Client)
	put("error", e.Code)
	put("tier", e.Tier)
	put("endpoint", e.Endpoint)
	put("prefill", e.Prefill)
	put("model", e.modelText())
	if e.TTFT > 0 {
		f["ttft_ms"] = ms(e.TTFT)
	}
	if len(e.Legs) > 0 {
		f["legs"] = e.Legs
	}
	if e.Metered {
		f["prompt_tokens"] = e.PromptTokens
		f["completion_tokens"] = e.CompletionTokens
	}
	l.log.WithFields(f).WithTime(e.Start).Info(Message)
}

// modelText is the model name as written: cut to maxModel bytes.
func (e *Entry) modelText() string {
	if len(e.Model) > maxModel {
		return e.Model[:maxModel]
	}
	return e.Model
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/1e3) / 1e3
}

// MS is d as a leg's milliseconds.
func MS(d time.Duration) float64 { return ms(d) }

// infoEnabled asks the logger behind l whether info lines are written, so a
// disabled level costs no field map.
func infoEnabled(l logrus.FieldLogger) bool {
	switch v := l.(type) {
	case *logrus.Entry:
		return v.Logger.IsLevelEnabled(logrus.InfoLevel)
	case *logrus.Logger:
		return v.IsLevelEnabled(logrus.InfoLevel)
	}
	return true
}
