package pd

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// SGLang fan-out: one bootstrap room serves one sample of one prompt, so a
// request for n samples (or a batched prompt list on /v1/completions) is
// served as one single-sample dual dispatch per (prompt, sample) unit, each
// with its own room, run concurrently on the chosen pair. The answers are
// merged back in order: choice index = prompt×n + sample, exactly as one
// engine numbers them. Streams are merged event by event as they arrive
// (each event's choice index rewritten, per-choice order kept), the usage
// chunks summed into one, and one [DONE] ends the stream. Any unit failing
// before the client got a byte fails the request with that unit's answer.

// maxFanOut bounds the dispatches one request may fan out to.
const maxFanOut = 32

// CodeFanOutMerge is the 502 when unit answers cannot be merged.
const CodeFanOutMerge = "pd_fanout_merge_failed"

// fanUnit is one single-sample dispatch of a fanned-out request.
type fanUnit struct {
	obj   object // the client body with n=1 (and its one prompt)
	index int    // the choice index its answer takes
	first bool   // sample 0 of its prompt: its prompt tokens count once
}

// fanOutUnits splits a request into its units.
func fanOutUnits(o *object, path string) ([]fanUnit, error) {
	n := int64(1)
	if v, ok := o.lookup(fieldN); ok && string(v) != "null" {
		n, _ = strconv.ParseInt(string(v), 10, 64) // checkN validated it
	}
	var prompts [][]byte // nil: the body's own (single) prompt
	if isCompletions(path) {
		if v, ok := o.lookup(fieldPrompt); ok && isPromptList(v) {
			prompts, _ = parseArray(v)
		}
	}
	np := max(len(prompts), 1)
	if int64(np)*n > maxFanOut {
		return nil, errFanOutTooWide
	}
	units := make([]fanUnit, 0, int64(np)*n)
	for p := range np {
		for s := range int(n) {
			edits := []edit{{fieldN, jsonOne}}
			if prompts != nil {
				edits = append(edits, edit{fieldPrompt, prompts[p]})
			}
			uo, err := parseObject(o.apply(edits))
			if err != nil {
				return nil, err
			}
			units = append(units, fanUnit{obj: uo, index: p*int(n) + s, first: s == 0})
		}
	}
	return units, nil
}

var errFanOutTooWide = &fanOutError{"a request may fan out to at most " + strconv.Itoa(maxFanOut) + " (prompt, sample) dispatches"}

type fanOutError struct{ msg string }

func (e *fanOutError) Error() string { return e.msg }

// fanOut serves a multi-sample SGLang request (see the file comment). Each
// unit runs as its own sgSeq: its own context, writer, outcome, body and
// request id, on the same pair.
func (q sgSeq) fanOut() {
	units, err := fanOutUnits(&q.obj, q.req.Path)
	if err != nil {
		q.fail(PhasePrefill, http.StatusBadRequest, CodeShapeUnsupported, "sglang prefill/decode fan-out: "+err.Error())
		return
	}
	// One context per unit: a failing unit must finish writing its answer
	// while the others are cancelled.
	cancels := make([]context.CancelFunc, len(units))
	cancelAll := func(except int) {
		for i, c := range cancels {
			if i != except {
				c()
			}
		}
	}
	defer cancelAll(-1)
	msgs := make(chan sampleMsg, 4*len(units))
	outs := make([]Outcome, len(units))
	var wg sync.WaitGroup
	for i := range units {
		uctx, c := context.WithCancel(q.ctx)
		cancels[i] = c
		sw := &sampleWriter{i: i, ctx: uctx, out: msgs, h: http.Header{}}
		u := *q.seq
		u.ctx, u.w, u.o, u.obj = uctx, sw, &outs[i], units[i].obj
		u.pair.Unsplit = false // a unit's answer is merged: it cannot be handed over
		u.head = q.head.Clone()
		if q.req.RequestID != "" {
			u.head.Set(headerRequestID, q.req.RequestID+"-"+strconv.Itoa(i)) // engines key on it: one per dispatch
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sgSeq{seq: &u, port: q.port}.serveOne()
			sw.send(sampleMsg{i: i, kind: msgEnd})
		}()
	}
	go func() { wg.Wait(); close(msgs) }()

	m := &fanMerger{w: q.w, units: units, samples: make([]sampleState, len(units))}
	m.run(q.ctx, msgs, cancelAll)
	cancelAll(-1)
	for range msgs { // let every unit finish
	}
	m.outcome(q.o, outs, q.ctx)
}

// Kinds of sampleMsg.
const (
	msgHead = iota
	msgData
	msgEnd
)

// sampleMsg is one unit's response event, in order.
type sampleMsg struct {
	i      int
	kind   int
	status int
	header http.Header
	data   []byte
}

// sampleWriter is the http.ResponseWriter one unit's dispatch writes to:
// everything goes to the merger as messages (bytes copied: the relay reuses
// its buffer). Once the fan-out is over its writes fail, which ends the
// unit's relay.
type sampleWriter struct {
	i     int
	ctx   context.Context
	out   chan<- sampleMsg
	h     http.Header
	wrote bool
}

func (w *sampleWriter) Header() http.Header { return w.h }

func (w *sampleWriter) WriteHeader(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.send(sampleMsg{i: w.i, kind: msgHead, status: status, header: w.h.Clone()})
}

func (w *sampleWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if !w.send(sampleMsg{i: w.i, kind: msgData, data: bytes.Clone(b)}) {
		return 0, w.ctx.Err()
	}
	return len(b), nil
}

func (w *sampleWriter) Flush() {}

func (w *sampleWriter) send(m sampleMsg) bool {
	select {
	case w.out <- m:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// sampleState is what the merger knows of one unit.
type sampleState struct {
	status  int
	header  http.Header
	pending []byte // SSE: bytes after the last complete event; else the body
	done    bool   // SSE: [DONE] seen
	ended   bool
}

// fanMerger merges the units' answers into the client response.
type fanMerger struct {
	w       http.ResponseWriter
	units   []fanUnit
	samples []sampleState
	heads   int
	ended   int
	started bool // the client's head is out (all units answered 200)
	sse     bool
	failed  int // index of the failing unit, -1 none
	usage   []byte
	usages  []usageCount
	id      []byte // SSE: the first chunk's id, given to every chunk (one completion)
	status  int    // what the client got
	cut     bool   // a unit's stream ended without [DONE] after the client's head
	merge   bool   // the non-SSE merge failed
}

type usageCount struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
}

func (m *fanMerger) run(ctx context.Context, msgs <-chan sampleMsg, cancelOthers func(except int)) {
	m.failed = -1
	rc := http.NewResponseController(m.w)
	for msg := range msgs {
		st := &m.samples[msg.i]
		switch msg.kind {
		case msgHead:
			st.status, st.header = msg.status, msg.header
			m.heads++
			if msg.status != http.StatusOK && m.failed < 0 {
				m.failed = msg.i
				cancelOthers(msg.i) // moot now; the failing unit finishes its answer
			}
		case msgData:
			st.pending = append(st.pending, msg.data...)
		case msgEnd:
			st.ended = true
			m.ended++
		}
		if m.failed >= 0 {
			if f := &m.samples[m.failed]; f.ended {
				if !m.started {
					writeBuffered(m.w, f.status, f.header, f.pending)
					m.status = f.status
				}
				return
			}
			continue
		}
		if !m.started && m.heads == len(m.units) {
			m.start()
		}
		if m.started && m.sse {
			if !m.emitEvents(msg.i) {
				return
			}
			_ = rc.Flush()
		}
		if m.ended == len(m.units) {
			m.finish(ctx)
			return
		}
	}
}

// start writes the client's head once every unit answered 200.
func (m *fanMerger) start() {
	m.started = true
	h0 := m.samples[0].header
	m.sse = strings.HasPrefix(h0.Get("Content-Type"), contentTypeSSE)
	if !m.sse {
		return // written whole at the end
	}
	copyResponseHeader(m.w.Header(), h0)
	m.w.Header().Del("Content-Length")
	m.w.WriteHeader(http.StatusOK)
	m.status = http.StatusOK
	for i := range m.samples {
		if !m.emitEvents(i) {
			return
		}
	}
}

// emitEvents writes unit i's complete SSE events: [DONE] is held back (one
// ends the merged stream), usage-only chunks are summed, every other event
// gets its choices' index rewritten. false: the client is gone.
func (m *fanMerger) emitEvents(i int) bool {
	st := &m.samples[i]
	for {
		k := bytes.Index(st.pending, []byte("\n\n"))
		if k < 0 {
			return true
		}
		ev := st.pending[:k]
		st.pending = st.pending[k+2:]
		payload, ok := bytes.CutPrefix(ev, []byte("data:"))
		if !ok {
			continue // comments and keep-alives are the units' own
		}
		payload = bytes.TrimSpace(payload)
		if string(payload) == "[DONE]" {
			st.done = true
			continue
		}
		out, usageOnly := m.rewriteChunk(payload, m.units[i])
		if usageOnly {
			continue
		}
		var b bytes.Buffer
		b.Grow(len(out) + 8)
		b.WriteString("data: ")
		b.Write(out)
		b.WriteString("\n\n")
		if _, err := m.w.Write(b.Bytes()); err != nil {
			return false
		}
	}
}

// rewriteChunk sets the choice index of one stream chunk (or one whole
// answer); a chunk with usage and no choices is stashed for the sum.
func (m *fanMerger) rewriteChunk(payload []byte, u fanUnit) (out []byte, usageOnly bool) {
	o, err := parseObject(payload)
	if err != nil {
		return payload, false
	}
	if uv, ok := o.lookup("usage"); ok && string(uv) != "null" {
		var uc usageCount
		if json.Unmarshal(uv, &uc) == nil {
			if !u.first {
				uc.Prompt = 0 // one prompt, counted once
			}
			if cv, ok := o.lookup("choices"); ok && string(bytes.TrimSpace(cv)) == "[]" {
				m.usages = append(m.usages, uc)
				if m.usage == nil {
					m.usage = bytes.Clone(payload)
				}
				return nil, true
			}
		}
	}
	cv, ok := o.lookup("choices")
	if !ok {
		return payload, false
	}
	choices, err := parseArray(cv)
	if err != nil {
		return payload, false
	}
	var arr bytes.Buffer
	arr.WriteByte('[')
	for j, c := range choices {
		if j > 0 {
			arr.WriteByte(',')
		}
		co, err := parseObject(c)
		if err != nil {
			return payload, false
		}
		arr.Write(co.apply([]edit{{"index", strconv.AppendInt(nil, int64(u.index+j), 10)}}))
	}
	arr.WriteByte(']')
	edits := []edit{{"choices", arr.Bytes()}}
	if m.sse {
		if id, ok := o.lookup("id"); ok {
			if m.id == nil {
				m.id = bytes.Clone(id)
			} else {
				edits = append(edits, edit{"id", m.id})
			}
		}
	}
	return o.apply(edits), false
}

// finish ends the merged answer: the summed usage chunk and one [DONE] for
// streams, the merged object otherwise.
func (m *fanMerger) finish(ctx context.Context) {
	if !m.started {
		return // no head from some unit: the client is gone
	}
	if m.sse {
		for _, st := range m.samples {
			if !st.done {
				m.cut = true
				_, _ = m.w.Write(sseCutEvent)
				return
			}
		}
		if m.usage != nil {
			if o, err := parseObject(m.usage); err == nil {
				edits := []edit{{"usage", m.sumUsage()}}
				if m.id != nil {
					edits = append(edits, edit{"id", m.id})
				}
				_, _ = m.w.Write(append(append([]byte("data: "), o.apply(edits)...), "\n\n"...))
			}
		}
		_, _ = m.w.Write(sseDone)
		return
	}
	// Whole answers: unit 0's object with every unit's choices, in order.
	var all bytes.Buffer
	all.WriteByte('[')
	var usages []usageCount
	for i := range m.samples {
		o, err := parseObject(m.samples[i].pending)
		if err != nil {
			m.mergeFailed()
			return
		}
		rw, _ := m.rewriteChunk(m.samples[i].pending, m.units[i])
		ro, _ := parseObject(rw)
		cv, _ := ro.lookup("choices")
		inner := bytes.TrimSpace(cv)
		if len(inner) < 2 || inner[0] != '[' {
			m.mergeFailed()
			return
		}
		if body := bytes.TrimSpace(inner[1 : len(inner)-1]); len(body) > 0 {
			if all.Len() > 1 {
				all.WriteByte(',')
			}
			all.Write(body)
		}
		if uv, ok := o.lookup("usage"); ok {
			var uc usageCount
			if json.Unmarshal(uv, &uc) == nil {
				if !m.units[i].first {
					uc.Prompt = 0
				}
				usages = append(usages, uc)
			}
		}
	}
	all.WriteByte(']')
	m.usages = usages
	o0, _ := parseObject(m.samples[0].pending)
	edits := []edit{{"choices", all.Bytes()}}
	if len(usages) > 0 {
		edits = append(edits, edit{"usage", m.sumUsage()})
	}
	writeBuffered(m.w, http.StatusOK, m.samples[0].header, o0.apply(edits))
	m.status = http.StatusOK
}

func (m *fanMerger) mergeFailed() {
	m.merge = true
	var o Outcome
	writeError(m.w, &o, PhaseDecode, http.StatusBadGateway, CodeFanOutMerge, "sglang fan-out: a unit's answer is not a completion object")
	m.status = http.StatusBadGateway
}

// sumUsage renders the units' usage summed (prompt tokens once per prompt).
func (m *fanMerger) sumUsage() []byte {
	var p, c int
	for _, u := range m.usages {
		p += u.Prompt
		c += u.Completion
	}
	b, _ := json.Marshal(map[string]int{"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})
	return b
}

// outcome folds the units' outcomes into the request's.
func (m *fanMerger) outcome(o *Outcome, outs []Outcome, ctx context.Context) {
	for i := range outs {
		u := &outs[i]
		o.Legs = append(o.Legs, u.Legs...)
		o.Prefill = max(o.Prefill, u.Prefill)
		if u.DecodeTTFB > 0 && (o.DecodeTTFB == 0 || u.DecodeTTFB < o.DecodeTTFB) {
			o.DecodeTTFB = u.DecodeTTFB
		}
		o.RoomRetry = o.RoomRetry || u.RoomRetry
		o.IdleTimeout = o.IdleTimeout || u.IdleTimeout
	}
	switch {
	case m.failed >= 0:
		f := outs[m.failed]
		o.Status, o.Code, o.FailedPhase, o.Relayed = f.Status, f.Code, f.FailedPhase, f.Relayed
		if m.started { // the head was out: the merged stream is cut
			o.StreamCut = true
		}
	case ctx.Err() != nil || !m.started:
		clientGone(o, PhaseDecode)
	case m.merge:
		o.Status, o.Code, o.FailedPhase = http.StatusBadGateway, CodeFanOutMerge, PhaseDecode
	default:
		o.Status = m.status
		o.StreamCut = m.cut
	}
}
