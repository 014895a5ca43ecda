package spec

import "strconv"

// WindowStatus is an endpoint's admission window (the rule's or its own
// admission_window, or one learned from the engine) and how much of it is
// taken now.
type WindowStatus struct {
	// Limit is the window's size; 0 while a window to be learned from the
	// engine is not known (the endpoint is then not held back).
	Limit int `json:"limit"`
	// InFlight is the requests holding a slot now (a P/D request holds
	// one on its prefill and one on its decode).
	InFlight int `json:"in_flight"`
	// Full: the endpoint is at its window and is not chosen while another
	// has room.
	Full bool `json:"full"`
	// Source is where a learned window came from (the engine's answer it
	// was read from, e.g. sglang_server_info); empty for a configured one.
	Source string `json:"source,omitempty"`
	// EngineLimit is the engine's own batch limit a learned window is this
	// gateway's share of (0: configured, or not learned).
	EngineLimit int `json:"engine_limit,omitempty"`
	// LearnError is why the latest read of the engine's limit was not
	// taken (the last learned one, if any, stays in force).
	LearnError string `json:"learn_error,omitempty"`
}

// Summary is the window on one line for tables: "3/16", or "16/16,full"
// at the window, with ",from=<source>" when learned from the engine, or
// "3/-,not_learned" while a window to be learned is unknown; "" for nil
// (no window).
func (w *WindowStatus) Summary() string {
	if w == nil {
		return ""
	}
	if w.Limit == 0 {
		return strconv.Itoa(w.InFlight) + "/-,not_learned"
	}
	s := strconv.Itoa(w.InFlight) + "/" + strconv.Itoa(w.Limit)
	if w.Full {
		s += ",full"
	}
	if w.Source != "" {
		s += ",from=" + w.Source
	}
	return s
}

// QueueStatus is a rule's gateway queue now, and the requests it shed
// since it was made (it is made when the rule first has an admission
// window and kept across rule updates; a daemon restart starts it anew).
type QueueStatus struct {
	Queued int `json:"queued"`
	// ByClass is Queued by priority class (low, standard, high).
	ByClass map[string]int `json:"by_class"`
	// OldestWaitSec is how long the longest-waiting request has waited.
	OldestWaitSec float64 `json:"oldest_wait_sec"`
	// Shed counts the requests shed, by reason (queue_full, wait_exceeded,
	// deadline, displaced); ShedTotal is their sum.
	Shed      map[string]uint64 `json:"shed,omitempty"`
	ShedTotal uint64            `json:"shed_total"`
}

// Summary is the queue on one line for tables: "queued=3,oldest=1.2s,
// shed=5"; "" for nil (no queue).
func (q *QueueStatus) Summary() string {
	if q == nil {
		return ""
	}
	return "queued=" + strconv.Itoa(q.Queued) + ",oldest=" + strconv.FormatFloat(q.OldestWaitSec, 'f', 1, 64) +
		"s,shed=" + strconv.FormatUint(q.ShedTotal, 10)
}
