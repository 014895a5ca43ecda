package accesslog

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"
)

// The encoder writes access lines straight to the daemon logger's writer,
// byte for byte what logrus's JSONFormatter or (uncoloured) TextFormatter
// would have written, with none of logrus's per-line cost: no field map,
// no entry copies, no reflection, no boxed values (about 40 allocations a
// request). It is built only for formatter settings it reproduces exactly
// (newEncoder); anything else — hooks, caller reports, renamed keys,
// colours on a terminal, a custom formatter — keeps the logrus path.
//
// Unbuffered, the line goes to the writer in one Write, as logrus does,
// under the encoder's lock (logrus's is private); buffered (Options.
// BufferBytes), whole lines go in batches (buffer.go). Either way access
// lines never interleave, and the writer must take a Write concurrent with
// logrus's own lines whole, as an *os.File (the daemon's stderr, a log
// file) does, or be locked itself.

// fieldID names what a slot of the line holds.
type fieldID uint8

const (
	fBase fieldID = iota // a field of the logger's entry (component=access), rendered once
	fTime
	fLevel
	fMsg
	fRequestID
	fTraceID
	fRule
	fVIP
	fMethod
	fPath
	fModel
	fClient
	fStatus
	fError
	fTier
	fEndpoint
	fPrefill
	fLegs
	fTTFT
	fDuration
	fBytesOut
	fPromptTokens
	fCompletionTokens
	fEnd // the line's end: only its lead
)

// lineKeys are the keys of the fields an Entry fills, as the logrus path
// names them.
var lineKeys = [...]struct {
	key string
	id  fieldID
}{
	{"request_id", fRequestID}, {"trace_id", fTraceID}, {"rule", fRule}, {"vip", fVIP},
	{"method", fMethod}, {"path", fPath}, {"model", fModel}, {"client", fClient},
	{"status", fStatus}, {"error", fError}, {"tier", fTier}, {"endpoint", fEndpoint},
	{"prefill", fPrefill}, {"legs", fLegs}, {"ttft_ms", fTTFT}, {"duration_ms", fDuration},
	{"bytes_out", fBytesOut}, {"prompt_tokens", fPromptTokens}, {"completion_tokens", fCompletionTokens},
}

// slot is one key of the line in the formatter's order: key rendered with
// its separator (`"key":` or `key=`), and a base field's value.
type slot struct {
	key   []byte
	id    fieldID
	value []byte
}

// stamp is a time value as written, for every time of one second in one
// location: the same text while the layout has no finer unit (RFC 3339,
// logrus's default).
type stamp struct {
	sec  int64
	loc  *time.Location
	text []byte
}

// quoting is the TextFormatter's value quoting.
type quoting struct {
	force, disable, empty bool
}

// encoder is one logger's line layout and its pooled buffers.
type encoder struct {
	mu      sync.Mutex // held across out.Write when unbuffered
	out     io.Writer
	buf     *bufWriter // batches lines to out (buffer.go); nil: a Write per line
	json    bool
	html    bool   // JSON: escape <, > and & as encoding/json does by default
	timeFmt string // "": no time key
	quote   quoting
	// leads[id] is written before field id whatever the entry holds: the
	// separators, keys and values of the fields that never change (the
	// logger's own, level, msg) since the field before, and id's key when
	// every line has the field; keys[id] is the key of a field written only
	// when known, with its separator. leads[fEnd] ends the line.
	leads, keys [fEnd + 1][]byte
	// time is first in text lines and among the sorted keys in JSON ones;
	// neither when the formatter writes no time.
	timeFirst, timeSorted bool
	bufs                  sync.Pool // *lineBuf
	// last is the latest second's time value, reused by the lines of the
	// same second when timeFmt is RFC 3339 (nil otherwise).
	last      atomic.Pointer[stamp]
	perSecond bool
}

// lineBuf is a pooled line and the scratch space of values rendered before
// they are quoted.
type lineBuf struct {
	b, scratch []byte
}

// maxPooled keeps a freak line's buffer out of the pool.
const maxPooled = 64 << 10

// newEncoder returns the direct encoder for log, or nil when log's
// logger is set up in a way only logrus itself renders.
func newEncoder(log logrus.FieldLogger) *encoder {
	var logger *logrus.Logger
	var base logrus.Fields
	switch v := log.(type) {
	case *logrus.Entry:
		if fieldError(v) {
			return nil
		}
		logger, base = v.Logger, v.Data
	case *logrus.Logger:
		logger = v
	}
	if logger == nil || logger.Out == nil || logger.ReportCaller || len(logger.Hooks[logrus.InfoLevel]) > 0 {
		return nil
	}
	enc := &encoder{out: logger.Out}
	switch f := logger.Formatter.(type) {
	case *logrus.JSONFormatter:
		if f.DataKey != "" || len(f.FieldMap) > 0 || f.PrettyPrint {
			return nil
		}
		enc.json, enc.html = true, !f.DisableHTMLEscape
		if !f.DisableTimestamp {
			enc.timeFmt = cmp.Or(f.TimestampFormat, time.RFC3339)
		}
	case *logrus.TextFormatter:
		if len(f.FieldMap) > 0 || f.SortingFunc != nil || f.ForceColors || f.EnvironmentOverrideColors ||
			(!f.DisableColors && maybeTerminal(logger.Out)) {
			return nil
		}
		enc.quote = quoting{force: f.ForceQuote, disable: f.DisableQuote, empty: f.QuoteEmptyFields}
		if !f.DisableTimestamp {
			enc.timeFmt = cmp.Or(f.TimestampFormat, time.RFC3339)
		}
	default:
		return nil
	}
	if !enc.layout(base) {
		return nil
	}
	return enc
}

// fieldError reports whether e carries logrus's record of a field it
// refused (a func value), which logrus writes on every line as
// logrus_error and keeps out of sight of anything but a formatter.
func fieldError(e *logrus.Entry) bool {
	var buf bytes.Buffer
	probe := e.WithFields(nil)
	probe.Logger = &logrus.Logger{Out: &buf, Formatter: &logrus.JSONFormatter{DisableTimestamp: true},
		Hooks: logrus.LevelHooks{}, Level: logrus.InfoLevel}
	probe.Info("")
	var line map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		return true
	}
	_, refused := line[logrus.FieldKeyLogrusError]
	return refused
}

// maybeTerminal reports whether w may be a terminal, where logrus's text
// formatter colours its lines: any character device counts (the encoder
// then leaves /dev/null to logrus too, which costs nothing but speed).
func maybeTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err != nil || st.Mode()&os.ModeCharDevice != 0
}

// layout orders the line's keys as the formatter does — JSON: every key
// sorted (encoding/json sorts a map's keys); text: time, level, msg, then
// the sorted fields — and renders the logger's own fields. It fails on a
// field logrus would rename or let a line's field override.
func (enc *encoder) layout(base logrus.Fields) bool {
	var slots []slot
	for k, v := range base {
		switch k {
		case logrus.FieldKeyTime, logrus.FieldKeyLevel, logrus.FieldKeyMsg, logrus.FieldKeyLogrusError:
			return false
		}
		for _, lk := range lineKeys {
			if lk.key == k {
				return false
			}
		}
		val, ok := enc.baseValue(v)
		if !ok {
			return false
		}
		slots = append(slots, slot{key: []byte(k), id: fBase, value: val})
	}
	for _, lk := range lineKeys {
		slots = append(slots, slot{key: []byte(lk.key), id: lk.id})
	}
	var fixed []slot
	if enc.timeFmt != "" {
		fixed = append(fixed, slot{key: []byte(logrus.FieldKeyTime), id: fTime})
	}
	fixed = append(fixed, slot{key: []byte(logrus.FieldKeyLevel), id: fLevel}, slot{key: []byte(logrus.FieldKeyMsg), id: fMsg})
	byKey := func(a, b slot) int { return bytes.Compare(a.key, b.key) }
	if enc.json {
		slots = append(slots, fixed...)
		slices.SortFunc(slots, byKey)
	} else {
		slices.SortFunc(slots, byKey)
		slots = append(fixed, slots...)
	}
	for i := range slots {
		s := &slots[i]
		if enc.json {
			s.key = append(appendJSONString(nil, string(s.key), enc.html), ':')
		} else {
			s.key = append(s.key, '=')
		}
	}
	enc.perSecond = enc.timeFmt == time.RFC3339
	return enc.compile(slots)
}

// lineOrder is the order line writes the fields an entry fills: their
// keys' sorted order, time aside (text lines start with it, JSON lines
// sort it in after tier).
var lineOrder = [...]fieldID{fBytesOut, fClient, fCompletionTokens, fDuration, fEndpoint, fError, fLegs, fMethod,
	fModel, fPath, fPrefill, fPromptTokens, fRequestID, fRule, fStatus, fTier, fTime, fTraceID, fTTFT, fVIP}

// compile renders the ordered slots' constant parts into leads and keys,
// and checks that the fields come in the order line writes them. The
// first slot is always written — text: time or level; JSON: a logger's
// field or bytes_out, the first of the line's keys and one every line has
// — so every later key's separator is fixed.
func (enc *encoder) compile(slots []slot) bool {
	var order []fieldID
	var lead []byte
	if enc.json {
		lead = append(lead, '{')
	}
	for i, s := range slots {
		var key []byte
		if i > 0 {
			key = append(key, ' ')
			if enc.json {
				key[0] = ','
			}
		}
		key = append(key, s.key...)
		switch s.id {
		case fBase:
			lead = append(append(lead, key...), s.value...)
			continue
		case fLevel:
			lead = enc.str(append(lead, key...), "info")
			continue
		case fMsg:
			lead = enc.str(append(lead, key...), Message)
			continue
		case fTime, fRequestID, fMethod, fPath, fStatus, fDuration, fBytesOut:
			// In every line: the key is part of the lead.
			enc.leads[s.id] = append(lead, key...)
		default:
			enc.leads[s.id], enc.keys[s.id] = lead, key
		}
		lead = nil
		order = append(order, s.id)
	}
	if enc.json {
		lead = append(lead, '}')
	}
	enc.leads[fEnd] = append(lead, '\n')
	if len(order) > 0 && order[0] == fTime && !enc.json {
		enc.timeFirst = true
		order = order[1:]
	}
	want := slices.DeleteFunc(slices.Clone(lineOrder[:]), func(id fieldID) bool { return id == fTime })
	if enc.timeSorted = enc.json && enc.timeFmt != ""; enc.timeSorted {
		want = lineOrder[:]
	}
	return slices.Equal(order, want)
}

// baseValue renders a field of the logger's entry as its formatter would.
func (enc *encoder) baseValue(v any) ([]byte, bool) {
	if enc.json {
		if err, ok := v.(error); ok {
			v = err.Error()
		}
		var b bytes.Buffer
		je := json.NewEncoder(&b)
		je.SetEscapeHTML(enc.html)
		if err := je.Encode(v); err != nil {
			return nil, false
		}
		return bytes.TrimSuffix(b.Bytes(), []byte("\n")), true
	}
	switch x := v.(type) {
	case string:
		return enc.str(nil, x), true
	case []byte:
		return enc.quote.appendBytes(nil, x), true
	case bool:
		return enc.str(nil, strconv.FormatBool(x)), true
	case error:
		return enc.str(nil, x.Error()), true
	case fmt.Stringer:
		return enc.str(nil, x.String()), true
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr:
		return enc.quote.appendNumber(nil, []byte(fmt.Sprint(x))), true
	case float32:
		return enc.quote.appendNumber(nil, strconv.AppendFloat(nil, float64(x), 'g', -1, 32)), true
	case float64:
		return enc.quote.appendNumber(nil, strconv.AppendFloat(nil, x, 'g', -1, 64)), true
	}
	return enc.str(nil, fmt.Sprint(v)), true
}

// write renders e and writes it in one Write.
func (enc *encoder) write(e *Entry) {
	lb, _ := enc.bufs.Get().(*lineBuf)
	if lb == nil {
		lb = &lineBuf{b: make([]byte, 0, 1024), scratch: make([]byte, 0, 256)}
	}
	lb.b = enc.line(lb.b[:0], lb, e)
	if enc.buf != nil {
		enc.buf.writeLine(lb.b)
	} else {
		enc.mu.Lock()
		_, _ = enc.out.Write(lb.b)
		enc.mu.Unlock()
	}
	if cap(lb.b) <= maxPooled && cap(lb.scratch) <= maxPooled {
		enc.bufs.Put(lb)
	}
}

// line appends e's line to b: the request's identity, status, duration
// and size always, the rest only when known, in lineOrder.
func (enc *encoder) line(b []byte, lb *lineBuf, e *Entry) []byte {
	L, K := &enc.leads, &enc.keys
	if enc.timeFirst {
		b = append(b, L[fTime]...)
		b = enc.time(b, lb, e.Start)
	}
	b = append(b, L[fBytesOut]...)
	b = enc.int(b, e.BytesOut)
	b = enc.opt(b, L[fClient], K[fClient], e.Client)
	b = appendLead(b, L[fCompletionTokens])
	if e.Metered {
		b = append(b, K[fCompletionTokens]...)
		b = enc.int(b, int64(e.CompletionTokens))
	}
	b = append(b, L[fDuration]...)
	b = enc.ms(b, e.Total)
	b = enc.opt(b, L[fEndpoint], K[fEndpoint], e.Endpoint)
	b = enc.opt(b, L[fError], K[fError], e.Code)
	b = appendLead(b, L[fLegs])
	if len(e.Legs) > 0 {
		b = append(b, K[fLegs]...)
		b = enc.legs(b, lb, e.Legs)
	}
	b = append(b, L[fMethod]...)
	b = enc.str(b, e.Method)
	b = enc.opt(b, L[fModel], K[fModel], e.modelText())
	b = append(b, L[fPath]...)
	b = enc.str(b, e.Path)
	b = enc.opt(b, L[fPrefill], K[fPrefill], e.Prefill)
	b = appendLead(b, L[fPromptTokens])
	if e.Metered {
		b = append(b, K[fPromptTokens]...)
		b = enc.int(b, int64(e.PromptTokens))
	}
	b = append(b, L[fRequestID]...)
	b = enc.str(b, e.RequestID)
	b = enc.opt(b, L[fRule], K[fRule], e.Rule)
	b = append(b, L[fStatus]...)
	b = enc.int(b, int64(e.Status))
	b = enc.opt(b, L[fTier], K[fTier], e.Tier)
	if enc.timeSorted {
		b = append(b, L[fTime]...)
		b = enc.time(b, lb, e.Start)
	}
	b = enc.opt(b, L[fTraceID], K[fTraceID], e.TraceID)
	b = appendLead(b, L[fTTFT])
	if e.TTFT > 0 {
		b = append(b, K[fTTFT]...)
		b = enc.ms(b, e.TTFT)
	}
	b = enc.opt(b, L[fVIP], K[fVIP], e.VIP)
	return append(b, L[fEnd]...)
}

// appendLead appends a lead, most often empty.
func appendLead(b, lead []byte) []byte {
	if len(lead) > 0 {
		b = append(b, lead...)
	}
	return b
}

// opt appends a string field written only when known: its lead always,
// then its key and value when v is not empty.
func (enc *encoder) opt(b, lead, key []byte, v string) []byte {
	b = appendLead(b, lead)
	if v == "" {
		return b
	}
	return enc.str(append(b, key...), v)
}

// time appends the line's time: the arrival, or now for an entry without
// one, as logrus stamps it. With an RFC 3339 layout the text is the same
// for a whole second, so a line of the second before's reuses it.
func (enc *encoder) time(b []byte, lb *lineBuf, t time.Time) []byte {
	if t.IsZero() {
		t = time.Now()
	}
	if enc.perSecond {
		if st := enc.last.Load(); st != nil && st.sec == t.Unix() && st.loc == t.Location() {
			return append(b, st.text...)
		}
	}
	lb.scratch = t.AppendFormat(lb.scratch[:0], enc.timeFmt)
	n := len(b)
	b = enc.strBytes(b, lb.scratch)
	if enc.perSecond {
		enc.last.Store(&stamp{sec: t.Unix(), loc: t.Location(), text: bytes.Clone(b[n:])})
	}
	return b
}

// legs appends the P/D legs: objects in JSON, a quoted list in text.
func (enc *encoder) legs(b []byte, lb *lineBuf, ls Legs) []byte {
	if enc.json {
		return appendJSONLegs(b, ls, enc.html)
	}
	lb.scratch = ls.appendText(lb.scratch[:0])
	return enc.quote.appendBytes(b, lb.scratch)
}

// str appends a string value as the formatter writes it, after one scan:
// a value with nothing to escape is copied whole — bare in text when every
// byte is safe, else between quotes — and only the rest takes strconv's or
// encoding/json's rune-by-rune way.
func (enc *encoder) str(b []byte, s string) []byte {
	c := scan(s)
	switch {
	case enc.json:
		if c&classJSON != 0 || (enc.html && c&classHTML != 0) {
			return appendJSONString(b, s, enc.html)
		}
	case !enc.quote.quotes(c, len(s)):
		return append(b, s...)
	case c&classEscape != 0:
		return strconv.AppendQuote(b, s)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func (enc *encoder) strBytes(b, raw []byte) []byte {
	if enc.json {
		return appendJSONString(b, raw, enc.html)
	}
	return enc.quote.appendBytes(b, raw)
}

func (enc *encoder) int(b []byte, n int64) []byte {
	if enc.json || !enc.quote.force {
		if n >= 0 {
			return appendUint(b, uint64(n))
		}
		return strconv.AppendInt(b, n, 10)
	}
	var raw [24]byte
	return enc.quote.appendNumber(b, strconv.AppendInt(raw[:0], n, 10))
}

// appendUint appends n in decimal, as strconv.AppendUint does, without its
// dispatch: a line's counts and sizes are a few digits each.
func appendUint(b []byte, n uint64) []byte {
	var buf [20]byte
	i := len(buf) - 1
	for n >= 10 {
		buf[i] = byte('0' + n%10)
		n /= 10
		i--
	}
	buf[i] = byte('0' + n)
	return append(b, buf[i:]...)
}

// exactNS bounds the durations whose milliseconds ms(d) computes exactly
// (float64(d) is d, and d/1e3 rounds to the nearest microsecond as the
// integer division does: no quotient's fraction is within float64's error
// of a half).
const exactNS = 1e15

// ms appends ms(d) as enc.float does, but in the range where that is the
// decimal digits of d's whole microseconds — below 10^6 ms in text, where
// %g turns to an exponent; in JSON, all below exactNS — from the integer,
// without formatting a float. Every decimal of 15 significant digits or
// fewer is the shortest form of the float64 nearest it, so the digits are
// the same.
func (enc *encoder) ms(b []byte, d time.Duration) []byte {
	if d >= 0 && d < exactNS && (enc.json || !enc.quote.force) {
		if us := (int64(d) + 500) / 1000; enc.json || us < 1e9 {
			return appendMicros(b, us)
		}
	}
	return enc.float(b, ms(d))
}

// appendMicros appends us microseconds as milliseconds: the whole part,
// then the fraction's digits without trailing zeros.
func appendMicros(b []byte, us int64) []byte {
	b = appendUint(b, uint64(us/1000))
	frac := us % 1000
	if frac == 0 {
		return b
	}
	b = append(b, '.', byte('0'+frac/100))
	if frac%100 != 0 {
		b = append(b, byte('0'+frac/10%10))
		if frac%10 != 0 {
			b = append(b, byte('0'+frac%10))
		}
	}
	return b
}

func (enc *encoder) float(b []byte, f float64) []byte {
	if enc.json {
		return appendJSONFloat(b, f)
	}
	var raw [32]byte
	return enc.quote.appendNumber(b, strconv.AppendFloat(raw[:0], f, 'g', -1, 64))
}

// Byte classes: what one scan of a value (scan) learns about it, so that
// the common values — ids, rule names, paths, addresses — are copied as
// they are after a table lookup per byte, and only values with bytes to
// escape take strconv's or encoding/json's rune-by-rune way.
const (
	// classQuote: logrus's TextFormatter quotes a value holding the byte
	// (any byte outside [A-Za-z0-9-._/@^+]).
	classQuote uint8 = 1 << iota
	// classEscape: strconv.Quote writes the byte other than as itself
	// (it is not printable ASCII, or it is '"' or '\').
	classEscape
	// classJSON: encoding/json may write the byte other than as itself: a
	// control byte, '"', '\', or a byte of a multi-byte rune (invalid
	// UTF-8, U+2028 and U+2029 are escaped).
	classJSON
	// classHTML: '<', '>' and '&', escaped by encoding/json's default
	// HTML escaping.
	classHTML
)

// byteClass is the classes of every byte value; computed once, never
// written.
var byteClass = func() (t [256]uint8) {
	for i := range t {
		c := byte(i)
		if !safeTextByte(c) {
			t[i] |= classQuote
		}
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			t[i] |= classEscape
		}
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			t[i] |= classJSON
		}
		if c == '<' || c == '>' || c == '&' {
			t[i] |= classHTML
		}
	}
	return t
}()

// scan is the union of the classes of s's bytes: a plain loop the
// compiler inlines and leaves without bounds checks (an eight-way unrolled
// one kept them, and a SWAR test of whole words cost more; see
// docs/performance.md).
func scan[S ~string | ~[]byte](s S) uint8 {
	var acc uint8
	for i := 0; i < len(s); i++ {
		acc |= byteClass[s[i]]
	}
	return acc
}

// appendBytes is encoder.str of raw (text only) without making it a string.
func (q quoting) appendBytes(b, raw []byte) []byte {
	c := scan(raw)
	switch {
	case !q.quotes(c, len(raw)):
		return append(b, raw...)
	case c&classEscape == 0:
		b = append(b, '"')
		b = append(b, raw...)
		return append(b, '"')
	}
	return appendQuoteBytes(b, raw)
}

// quotes is logrus's choice for a value of n bytes whose classes are c:
// forced, an empty value when asked, else any byte outside
// [A-Za-z0-9-._/@^+] unless quoting is disabled.
func (q quoting) quotes(c uint8, n int) bool {
	return q.force || (q.empty && n == 0) || (!q.disable && c&classQuote != 0)
}

// appendNumber appends a rendered number: bare, or quoted under ForceQuote.
func (q quoting) appendNumber(b, num []byte) []byte {
	if q.force {
		return appendQuoteBytes(b, num)
	}
	return append(b, num...)
}

func safeTextByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '/', '@', '^', '+':
		return true
	}
	return false
}

// appendQuoteBytes is strconv.AppendQuote of raw without converting it to
// a string when it is printable ASCII (a time, the legs), which strconv
// writes as is but for '"' and '\'.
func appendQuoteBytes(b, raw []byte) []byte {
	for _, c := range raw {
		if c < 0x20 || c > 0x7e {
			return strconv.AppendQuote(b, string(raw))
		}
	}
	b = append(b, '"')
	for _, c := range raw {
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return append(b, '"')
}

// appendText appends the legs' text form: phase@endpoint:status/ms each.
func (ls Legs) appendText(b []byte) []byte {
	for k, l := range ls {
		if k > 0 {
			b = append(b, ' ')
		}
		b = append(b, l.Phase...)
		b = append(b, '@')
		b = append(b, l.Endpoint...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(l.Status), 10)
		b = append(b, '/')
		b = strconv.AppendFloat(b, l.MS, 'f', 3, 64)
		b = append(b, "ms"...)
	}
	return b
}

// appendJSONLegs appends the legs as encoding/json renders []Leg.
func appendJSONLegs(b []byte, ls Legs, html bool) []byte {
	b = append(b, '[')
	for k, l := range ls {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"phase":`...)
		b = appendJSONString(b, l.Phase, html)
		b = append(b, `,"endpoint":`...)
		b = appendJSONString(b, l.Endpoint, html)
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(l.Status), 10)
		b = append(b, `,"ms":`...)
		b = appendJSONFloat(b, l.MS)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendJSONFloat is encoding/json's float64: the shortest form, in
// exponent notation below 1e-6 and from 1e21. A NaN or infinity, which
// encoding/json refuses (and logrus then drops the line), is written null.
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// jsonSafe reports whether encoding/json writes the ASCII byte c as is in
// a string.
func jsonSafe(c byte, html bool) bool {
	if c < 0x20 || c == '"' || c == '\\' {
		return false
	}
	return !html || (c != '<' && c != '>' && c != '&')
}

// appendJSONString appends src as encoding/json writes a string: control
// bytes, quotes and backslashes escaped (and <, >, & when html), invalid
// UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendJSONString[S ~string | ~[]byte](b []byte, src S, html bool) []byte {
	b = append(b, '"')
	if c := scan(src); c&classJSON == 0 && (!html || c&classHTML == 0) {
		b = append(b, src...)
		return append(b, '"')
	}
	start := 0
	for i := 0; i < len(src); {
		if c := src[i]; c < utf8.RuneSelf {
			if jsonSafe(c, html) {
				i++
				continue
			}
			b = append(b, src[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		n := min(len(src)-i, utf8.UTFMax)
		r, size := utf8.DecodeRuneInString(string(src[i : i+n]))
		if r == utf8.RuneError && size == 1 {
			b = append(b, src[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, src[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, src[start:]...)
	return append(b, '"')
}
