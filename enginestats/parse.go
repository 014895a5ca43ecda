package enginestats

import (
	"bytes"
	"math"
	"strconv"
	"strings"
)

// Reasons a scrape is not taken (the "result" label of
// infergate_engine_scrapes_total and Snapshot.Reason). ReasonOK is a good
// scrape.
const (
	ReasonOK           = "ok"
	ReasonConnect      = "connect_error" // dial refused or reset
	ReasonTimeout      = "timeout"       // no full answer within Options.Timeout
	ReasonStatus       = "http_status"   // an answer other than 200
	ReasonTooLarge     = "too_large"     // body over Options.MaxBytes
	ReasonParse        = "parse_error"   // not the text exposition format
	ReasonInvalid      = "invalid_value" // NaN, infinite, negative or a KV fraction above 1
	ReasonNoSignal     = "no_signal"     // none of the engine's families exported
	ReasonCounterReset = "counter_reset" // a counter went backwards: engine restart
)

// kvSlack tolerates float noise above a full cache (1.0); anything larger is
// not a fraction (someone exporting percent) and is refused.
const kvSlack = 1.001

// LoRA is vLLM's adapter state from vllm:lora_requests_info.
type LoRA struct {
	Running []string // adapters with requests in the running batch
	Waiting []string // adapters with requests queued
	Max     int      // max_lora: adapters that fit at once (0: not said)
}

// Sample is what one exposition says about an engine. Series of one family
// (DP ranks, several engines behind one port) are summed for the counts and
// the largest KV fraction is kept: a request lands on one of them, and the
// fullest cache is the one that evicts.
type Sample struct {
	Waiting   float64
	Running   float64
	KVUsage   float64 // 0..1
	Completed float64
	LoRA      *LoRA
	has       uint8 // bit per Field seen
	loraStamp float64
}

// Has reports whether the exposition carried field f.
func (s *Sample) Has(f Field) bool { return s.has&(1<<f) != 0 }

// Signal reports whether the sample says anything about load.
func (s *Sample) Signal() bool {
	return s.Has(FieldWaiting) || s.Has(FieldRunning) || s.Has(FieldKVUsage)
}

// ParseError is a body that cannot be taken, with its reason.
type ParseError struct {
	Reason string
	Line   int
	Msg    string
}

func (e *ParseError) Error() string {
	return e.Reason + " at line " + strconv.Itoa(e.Line) + ": " + e.Msg
}

// Parse reads a Prometheus text exposition (0.0.4 or OpenMetrics text) and
// fills the fields of d's families. Lines of other families are only checked
// to start with a metric name, so a body in another format (JSON, HTML) is a
// parse error, while the cost stays one pass with no allocation for the
// families that are skipped. A body without any of d's families is a
// ReasonNoSignal error.
func Parse(body []byte, d *Dialect) (Sample, error) {
	var s Sample
	ln := 0
	for len(body) > 0 {
		ln++
		var line []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			line, body = body, nil
		}
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		// Only the first byte of a skipped line is checked: enough to refuse
		// JSON, HTML or binary bodies without paying a scan of every name.
		if !nameStart(line[0]) {
			return s, &ParseError{ReasonParse, ln, "not a sample line"}
		}
		f, n := d.match(line)
		if f == 0 {
			continue
		}
		if n == len(line) {
			return s, &ParseError{ReasonParse, ln, "sample without a value"}
		}
		rest := line[n:]
		var labels []byte
		if rest[0] == '{' {
			end := labelsEnd(rest)
			if end < 0 {
				return s, &ParseError{ReasonParse, ln, "unterminated label set"}
			}
			labels, rest = rest[1:end], rest[end+1:]
		}
		rest = bytes.TrimLeft(rest, " \t")
		if i := bytes.IndexAny(rest, " \t"); i >= 0 {
			rest = rest[:i] // drop the timestamp
		}
		v, err := strconv.ParseFloat(string(rest), 64)
		if err != nil {
			return s, &ParseError{ReasonParse, ln, "value is not a number"}
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || (f == FieldKVUsage && v > kvSlack) {
			return s, &ParseError{ReasonInvalid, ln, string(line[:n]) + " = " + strconv.FormatFloat(v, 'g', -1, 64)}
		}
		s.add(f, v, labels)
	}
	if !s.Signal() {
		return s, &ParseError{ReasonNoSignal, ln, "none of " + d.Engine + "'s load families in the exposition"}
	}
	return s, nil
}

func (s *Sample) add(f Field, v float64, labels []byte) {
	switch f {
	case FieldWaiting:
		s.Waiting += v
	case FieldRunning:
		s.Running += v
	case FieldKVUsage:
		s.KVUsage = max(s.KVUsage, min(v, 1))
	case FieldCompleted:
		s.Completed += v
	case FieldLoRA:
		// One series per adapter set; the value is when it was set: the
		// newest is the current state.
		if s.LoRA != nil && v < s.loraStamp {
			return
		}
		s.loraStamp = v
		mx, _ := strconv.Atoi(labelValue(labels, "max_lora"))
		s.LoRA = &LoRA{
			Running: splitList(labelValue(labels, "running_lora_adapters")),
			Waiting: splitList(labelValue(labels, "waiting_lora_adapters")),
			Max:     mx,
		}
	}
	s.has |= 1 << f
}

// nameStart reports whether c may start a metric name.
func nameStart(c byte) bool {
	return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// labelsEnd is the index of the '}' closing the label set b starts with,
// skipping quoted values (with their escapes); -1 when there is none.
func labelsEnd(b []byte) int {
	quoted := false
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i
		}
	}
	return -1
}

// labelValue returns the (unescaped) value of label key in a label set's
// inside (`a="x",b="y"`), "" when absent.
func labelValue(labels []byte, key string) string {
	for len(labels) > 0 {
		labels = bytes.TrimLeft(labels, " \t,")
		eq := bytes.IndexByte(labels, '=')
		if eq < 0 || eq+1 >= len(labels) || labels[eq+1] != '"' {
			return ""
		}
		name := bytes.TrimSpace(labels[:eq])
		v := labels[eq+2:]
		var sb strings.Builder
		end := -1
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c == '\\' && i+1 < len(v) {
				i++
				switch v[i] {
				case 'n':
					sb.WriteByte('\n')
				default:
					sb.WriteByte(v[i])
				}
				continue
			}
			if c == '"' {
				end = i
				break
			}
			sb.WriteByte(c)
		}
		if end < 0 {
			return ""
		}
		if string(name) == key {
			return sb.String()
		}
		labels = v[end+1:]
	}
	return ""
}

// splitList splits vLLM's comma-separated adapter list; nil for "".
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
