// Command ssesoak drives a running gateway with waves of SSE streams that
// end in every way a stream can end, and checks what each wave leaves
// behind. It serves the engine itself (a tagging fake on loopback: every
// event carries its stream's id, so a client can tell its own events from
// another stream's), and for each stream picks at random one of:
//
//   - normal: read to the end; the engine connection goes back to the pool
//     and the next stream reuses it;
//   - client-gone: the client closes mid-stream; the engine must see its
//     socket close soon after (the gap is reported);
//   - client-stall: the engine sends, without pauses, more than the
//     gateway's client socket takes while the client stops reading for a
//     while (the gateway's client write would block, so a looped stream
//     leaves its loop), then the client reads the rest;
//   - engine-fin, engine-rst: the engine closes (FIN) or resets (SO_LINGER
//     0) mid-stream;
//   - stall-fin: as client-stall, but the engine closes after its last
//     event without ending the body: the FIN comes while the stream is
//     out of its loop, behind bytes the gateway has not read;
//   - stall-gone: as client-stall, but the client closes instead of
//     reading on: the gateway's blocked write fails, and the engine must
//     see its socket close;
//   - engine-silent: the engine stops sending past the gateway's stream
//     idle bound (start the gateway with a short --stream-idle-timeout).
//
// After each wave, once the gateway is idle, its open descriptors
// (/proc/<pid>/fd) less the engine connections the fake engine holds open
// (the pool's idle ones) must be back at the count before the first wave.
// Every loop is bounded by -timeout; connections are loopback only.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The stream endings a wave mixes (see the package comment).
const (
	modeNormal = iota
	modeClientGone
	modeClientStall
	modeEngineFIN
	modeEngineRST
	modeEngineSilent
	modeStallFIN
	modeStallGone
	numModes
)

var modeNames = [numModes]string{"normal", "client-gone", "client-stall", "engine-fin", "engine-rst", "engine-silent", "stall-fin", "stall-gone"}

func main() {
	gw := flag.String("gateway", "", "gateway VIP address (127.x.y.z:port)")
	engineAddr := flag.String("engine", "", "address the fake engine listens on (the rule's endpoint)")
	pid := flag.Int("pid", 0, "gateway pid (its /proc/<pid>/fd is counted)")
	waves := flag.Int("waves", 5, "waves of streams")
	streams := flag.Int("streams", 1000, "streams per wave (all open at once)")
	seq := flag.Int("seq", 1, "streams each of a wave's clients runs one after the other (the next one reuses the engine connection the last one gave back)")
	events := flag.Int("events", 40, "events of a whole stream")
	gap := flag.Duration("gap", 5*time.Millisecond, "engine's pause between events")
	keepAlive := flag.Duration("engine-keepalive", 0, "engine closes a connection idle this long after an answer (0: never), as uvicorn's keep-alive timer")
	headDelay := flag.Duration("head-delay", 0, "engine's pause before each answer's head (with -rule-name: streams waiting for their engine while the rule goes)")
	stall := flag.Duration("stall", 300*time.Millisecond, "how long a client-stall client stops reading")
	normalPct := flag.Int("normal-pct", 40, "share of normal streams in percent; the rest is spread over the other endings")
	settle := flag.Duration("settle", 15*time.Second, "bound on waiting for the gateway's descriptors after a wave")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on the whole run")
	api := flag.String("api", "", "gateway API address (its go_goroutines is checked after each wave); with -rule-name, the rule is deleted and put back during odd waves")
	ruleName := flag.String("rule-name", "", "name of the rule to delete and put back (with -api)")
	only := flag.String("only", "", "run only this ending (normal, client-gone, …)")
	ruleJSON := flag.String("rule-json", "", "file with the rule's JSON, put back after the delete")
	flag.Parse()
	if !strings.HasPrefix(*gw, "127.") || !strings.HasPrefix(*engineAddr, "127.") {
		fail(errors.New("-gateway and -engine must be loopback addresses"))
	}
	deadline := time.Now().Add(*timeout)
	eng, err := startEngine(*engineAddr, *gap, *headDelay, *keepAlive)
	if err != nil {
		fail(err)
	}
	defer eng.ln.Close()
	onlyMode := slices.Index(modeNames[:], *only)
	if *only != "" && onlyMode < 0 {
		fail(fmt.Errorf("-only %q: no such ending", *only))
	}
	s := &soak{seq: max(1, *seq), only: onlyMode, gw: *gw, eng: eng, events: *events, stall: *stall, normalPct: *normalPct, deadline: deadline}
	base := -1
	if *pid > 0 {
		base = fdCount(*pid)
		fmt.Printf("idle gateway descriptors: %d\n", base)
	}
	baseG := -1
	if *api != "" {
		baseG = goroutines(*api)
		fmt.Printf("idle gateway goroutines: %d\n", baseG)
	}
	failed := false
	for w := 0; w < *waves && time.Now().Before(deadline); w++ {
		var cut func()
		if *api != "" && *ruleName != "" && w%2 == 1 {
			cut = func() { cutRule(*api, *ruleName, *ruleJSON) }
		}
		r := s.wave(w, *streams, cut)
		fmt.Println(r.String())
		if r.bad > 0 {
			failed = true
		}
		if *pid > 0 {
			fds, open, ok := settleFDs(*pid, base, eng, *settle)
			fmt.Printf("wave %d: gateway descriptors %d, engine connections open %d, idle count %d: %s\n", w, fds, open, base, okWord(ok))
			if !ok {
				failed = true
			}
		}
		if baseG >= 0 {
			g, ok := settleGoroutines(*api, baseG, *settle)
			fmt.Printf("wave %d: gateway goroutines %d, idle %d: %s\n", w, g, baseG, okWord(ok))
			if !ok {
				failed = true
			}
		}
	}
	fmt.Printf("engine: %d connections accepted, %d requests (%.2f a connection)\n", eng.accepted.Load(), eng.requests.Load(), float64(eng.requests.Load())/float64(max(1, eng.accepted.Load())))
	if failed {
		fmt.Println("FAIL")
		os.Exit(1)
	}
	fmt.Println("PASS")
}

func okWord(ok bool) string {
	if ok {
		return "ok"
	}
	return "NOT BACK"
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ssesoak:", err)
	os.Exit(2)
}

// fdCount is the number of open descriptors of pid (-1 when unreadable).
func fdCount(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// settleFDs waits until the gateway's descriptors, less the engine
// connections still open (pooled), are back at base.
func settleFDs(pid, base int, eng *engine, bound time.Duration) (fds int, open int64, ok bool) {
	end := time.Now().Add(bound)
	for {
		// Both counts read again: a connection closing in between
		// must not pass the check.
		open = eng.open.Load()
		fds = fdCount(pid)
		// While the pool keeps engine connections, its hang-up watcher
		// has an epoll set open too.
		extra := fds - int(open) - base
		if open == eng.open.Load() && (extra == 0 || extra == 1 && open > 0) {
			return fds, open, true
		}
		if time.Now().After(end) {
			return fds, open, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// goroutines is the gateway's go_goroutines (-1 when unreadable).
func goroutines(api string) int {
	resp, err := apiClient.Get("http://" + api + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			var n int
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	return -1
}

// apiClient keeps no connection to the gateway's API open between calls:
// it would count among the gateway's descriptors.
var apiClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}

// goroutineSlack is what an idle gateway may run beyond its count before
// the first wave: an epoll loop or hang-up watcher that ends on its next
// tick, the pool's reaper.
const goroutineSlack = 4

// settleGoroutines waits until the gateway's goroutines are back near base.
func settleGoroutines(api string, base int, bound time.Duration) (int, bool) {
	end := time.Now().Add(bound)
	for {
		g := goroutines(api)
		if g >= 0 && g <= base+goroutineSlack {
			return g, true
		}
		if time.Now().After(end) {
			return g, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cutRule deletes the rule by name and puts it back (a rule removed while
// its streams run).
func cutRule(api, name, file string) {
	req, _ := http.NewRequest(http.MethodDelete, "http://"+api+"/netlox/v1/config/loadbalancer/name/"+name, nil)
	if resp, err := apiClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		fmt.Printf("rule %s deleted: %s\n", name, resp.Status)
	} else {
		fmt.Println("rule delete:", err)
	}
	if file == "" {
		return
	}
	body, err := os.ReadFile(file)
	if err != nil {
		fmt.Println("rule file:", err)
		return
	}
	time.Sleep(200 * time.Millisecond)
	resp, err := apiClient.Post("http://"+api+"/netlox/v1/config/loadbalancer", "application/json", bytes.NewReader(body))
	if err != nil {
		fmt.Println("rule put back:", err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	fmt.Printf("rule %s put back: %s\n", name, resp.Status)
}

// engine is the tagging fake engine: each request's prompt says its
// stream id, its ending and after how many events.
type engine struct {
	ln  net.Listener
	gap time.Duration
	// headDelay: each answer's head waits this long.
	headDelay time.Duration
	// keepAlive: an idle connection is closed after this long (0: never).
	keepAlive time.Duration
	accepted  atomic.Int64
	requests  atomic.Int64
	open      atomic.Int64
	mu        sync.Mutex
	closedAt  map[int]time.Time // client-gone streams: when the engine saw its socket close
}

func startEngine(addr string, gap, headDelay, keepAlive time.Duration) (*engine, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("engine listen: %w", err)
	}
	e := &engine{ln: ln, gap: gap, headDelay: headDelay, keepAlive: keepAlive, closedAt: map[int]time.Time{}}
	go e.serve()
	return e, nil
}

func (e *engine) serve() {
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.accepted.Add(1)
		e.open.Add(1)
		go func() {
			defer e.open.Add(-1)
			defer c.Close()
			e.conn(c.(*net.TCPConn))
		}()
	}
}

// spec is what a request's prompt asks of the engine.
type spec struct {
	id, mode, at, events, size int
}

func parseSpec(prompt string) (spec, bool) {
	var s spec
	n, err := fmt.Sscanf(prompt, "soak %d %d %d %d %d", &s.id, &s.mode, &s.at, &s.events, &s.size)
	return s, err == nil && n == 5
}

// conn serves one engine connection, request after request.
func (e *engine) conn(c *net.TCPConn) {
	br := bufio.NewReader(c)
	for {
		if e.keepAlive > 0 {
			_ = c.SetReadDeadline(time.Now().Add(e.keepAlive))
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		var body struct {
			Prompt string `json:"prompt"`
		}
		err = json.NewDecoder(req.Body).Decode(&body)
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
		e.requests.Add(1)
		_ = c.SetReadDeadline(time.Time{})
		s, ok := parseSpec(body.Prompt)
		if err != nil || !ok { // the gateway's health probe
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
			continue
		}
		if !e.stream(c, br, s) {
			return
		}
	}
}

// stream answers one request; false when the connection is done.
func (e *engine) stream(c *net.TCPConn, br *bufio.Reader, s spec) bool {
	time.Sleep(e.headDelay)
	bw := bufio.NewWriter(c)
	_, _ = io.WriteString(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
	if bw.Flush() != nil {
		return false
	}
	gone := make(chan struct{})
	var selfEnd atomic.Bool // the engine ends the stream itself: its own close follows
	watch := s.mode == modeClientGone || s.mode == modeEngineSilent || s.mode == modeStallGone
	if watch {
		// The gateway sends nothing more on this connection before the
		// stream ends: a read returns only when it closes the socket, or
		// when the engine does after sending every event (not a close the
		// gateway made: the stream then counts as never seen closing).
		go func() {
			var b [1]byte
			_, _ = br.Read(b[:])
			if !selfEnd.Load() {
				e.mu.Lock()
				e.closedAt[s.id] = time.Now()
				e.mu.Unlock()
			}
			close(gone)
		}()
	}
	pad := strings.Repeat("x", s.size)
	for i := 0; i < s.events; i++ {
		if i == s.at {
			switch s.mode {
			case modeEngineFIN:
				return false
			case modeEngineRST:
				_ = c.SetLinger(0)
				return false
			case modeEngineSilent:
				select {
				case <-gone:
				case <-time.After(time.Minute):
					selfEnd.Store(true)
				}
				return false
			}
		}
		ev := fmt.Sprintf("data: {\"id\":%d,\"seq\":%d,\"pad\":\"%s\"}\n\n", s.id, i, pad)
		fmt.Fprintf(bw, "%x\r\n%s\r\n", len(ev), ev)
		if bw.Flush() != nil {
			return false
		}
		switch {
		case s.mode == modeStallGone:
			select {
			case <-gone:
				return false
			default:
			}
		case watch:
			select {
			case <-gone:
				return false
			case <-time.After(e.gap):
			}
		case s.mode != modeClientStall && s.mode != modeStallFIN:
			time.Sleep(e.gap)
		}
	}
	if s.mode == modeStallFIN {
		return false // a FIN with the body unfinished
	}
	selfEnd.Store(true)
	ev := "data: [DONE]\n\n"
	fmt.Fprintf(bw, "%x\r\n%s\r\n0\r\n\r\n", len(ev), ev)
	return bw.Flush() == nil && !watch
}

// stallEventSize is a client-stall stream's event size: its events carry
// 40 × 160 KiB, more than tcp_wmem's largest send buffer and the client's
// receive buffer together.
const stallEventSize = 160 << 10

// soak drives the waves.
type soak struct {
	seq       int
	only      int // one ending for every stream, or -1
	gw        string
	eng       *engine
	events    int
	stall     time.Duration
	normalPct int
	deadline  time.Time
	nextID    atomic.Int64
}

// report counts a wave's outcomes.
type report struct {
	wave     int
	byMode   [numModes]int
	bad      int      // streams whose checks failed
	badNotes []string // the first few
	goneGaps []time.Duration
	missing  int // client-gone streams the engine never saw close
	longest  [numModes]time.Duration
	badKinds map[string]int // bad streams by what went wrong
	elapsed  time.Duration
	mu       sync.Mutex
}

func (r *report) failf(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bad++
	msg := fmt.Sprintf(format, a...)
	if r.badKinds == nil {
		r.badKinds = map[string]int{}
	}
	r.badKinds[badKind(msg)]++
	if len(r.badNotes) < 8 {
		r.badNotes = append(r.badNotes, msg)
	}
}

func (r *report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wave %d (%v):", r.wave, r.elapsed.Round(time.Millisecond))
	for m, n := range r.byMode {
		fmt.Fprintf(&b, " %s=%d", modeNames[m], n)
	}
	fmt.Fprintf(&b, " bad=%d longest:", r.bad)
	for m, d := range r.longest {
		fmt.Fprintf(&b, " %s=%v", modeNames[m], d.Round(time.Millisecond))
	}
	if len(r.goneGaps) > 0 {
		slices.Sort(r.goneGaps)
		q := func(p float64) time.Duration { return r.goneGaps[int(p*float64(len(r.goneGaps)-1))] }
		fmt.Fprintf(&b, " client-gone→engine close: n=%d p50=%v p99=%v max=%v over100ms=%d",
			len(r.goneGaps), q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(1).Round(time.Microsecond), countOver(r.goneGaps, 100*time.Millisecond))
	}
	fmt.Fprintf(&b, " engine-never-saw-close=%d", r.missing)
	for _, k := range slices.Sorted(maps.Keys(r.badKinds)) {
		fmt.Fprintf(&b, "\n  bad %q: %d", k, r.badKinds[k])
	}
	for _, n := range r.badNotes {
		b.WriteString("\n  " + n)
	}
	return b.String()
}

// badKind is a failure's class: its text without the stream's numbers.
func badKind(msg string) string {
	var b strings.Builder
	for _, r := range msg {
		if r >= '0' && r <= '9' {
			if !strings.HasSuffix(b.String(), "N") {
				b.WriteByte('N')
			}
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func countOver(ds []time.Duration, lim time.Duration) int {
	n := 0
	for _, d := range ds {
		if d > lim {
			n++
		}
	}
	return n
}

// wave opens n streams at once and waits for all; cut, when set, runs
// while they are open.
func (s *soak) wave(w, n int, cut func()) *report {
	r := &report{wave: w}
	start := time.Now()
	goneAt := make(map[int]time.Time)
	var goneMu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range s.seq {
				s.one(r, goneAt, &goneMu)
			}
		}()
		if i%100 == 99 {
			time.Sleep(10 * time.Millisecond) // open in batches, not in one burst
		}
	}
	if cut != nil {
		time.Sleep(200 * time.Millisecond) // every stream has its answer's head
		cut()
	}
	wg.Wait()
	// The engine's view of client-gone streams.
	time.Sleep(300 * time.Millisecond)
	s.eng.mu.Lock()
	for id, t := range goneAt {
		if t.IsZero() {
			continue
		}
		if c, ok := s.eng.closedAt[id]; ok {
			r.goneGaps = append(r.goneGaps, c.Sub(t))
		} else {
			r.missing++
		}
	}
	s.eng.mu.Unlock()
	r.elapsed = time.Since(start)
	return r
}

// one runs one stream of a wave and records it in r.
func (s *soak) one(r *report, goneAt map[int]time.Time, goneMu *sync.Mutex) {
	id := int(s.nextID.Add(1))
	mode := modeNormal
	if rand.IntN(100) >= s.normalPct {
		mode = 1 + rand.IntN(numModes-1)
	}
	if s.only >= 0 {
		mode = s.only
	}
	sp := spec{id: id, mode: mode, at: 1 + rand.IntN(s.events-2), events: s.events}
	if mode == modeStallGone {
		// More than every buffer on the way holds: the engine is still
		// sending when the client goes.
		sp.events = 1000
	}
	if mode == modeClientStall || mode == modeStallFIN || mode == modeStallGone {
		// Sent without pauses, more than the gateway's client socket
		// takes (its send buffer grows to tcp_wmem's 4 MiB on loopback)
		// while the client does not read: the gateway's write would
		// block, and a looped stream leaves its loop.
		sp.size = stallEventSize
	}
	began := time.Now()
	t, err := s.client(sp)
	r.mu.Lock()
	r.byMode[mode]++
	r.longest[mode] = max(r.longest[mode], time.Since(began))
	r.mu.Unlock()
	if err != nil {
		r.failf("stream %d (%s at %d): %v", sp.id, modeNames[sp.mode], sp.at, err)
	}
	if mode == modeClientGone || mode == modeStallGone {
		goneMu.Lock()
		goneAt[sp.id] = t
		goneMu.Unlock()
	}
}

// client runs one stream and checks what it got; for client-gone, the
// time it closed.
func (s *soak) client(sp spec) (time.Time, error) {
	c, err := net.DialTimeout("tcp", s.gw, 5*time.Second)
	if err != nil {
		return time.Time{}, fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	if sp.mode == modeClientStall {
		_ = c.(*net.TCPConn).SetReadBuffer(32 << 10)
	}
	_ = c.SetDeadline(s.deadline)
	body := fmt.Sprintf(`{"model":"fake-model","stream":true,"prompt":"soak %d %d %d %d %d"}`, sp.id, sp.mode, sp.at, sp.events, sp.size)
	req := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c, req); err != nil {
		return time.Time{}, fmt.Errorf("write request: %w", err)
	}
	br := bufio.NewReaderSize(c, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return time.Time{}, fmt.Errorf("read response head: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return time.Time{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 2*stallEventSize)
	seq := 0
	done := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if done {
			return time.Time{}, fmt.Errorf("bytes after [DONE]: %q", line)
		}
		if line == "data: [DONE]" {
			done = true
			continue
		}
		var ev struct{ ID, Seq int }
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
			return time.Time{}, fmt.Errorf("event %d: %w (%.60q)", seq, err, line)
		}
		if ev.ID != sp.id || ev.Seq != seq {
			return time.Time{}, fmt.Errorf("event %d: got stream %d event %d", seq, ev.ID, ev.Seq)
		}
		seq++
		switch {
		case sp.mode == modeClientGone && seq == sp.at:
			t := time.Now()
			_ = c.Close()
			return t, nil
		case (sp.mode == modeClientStall || sp.mode == modeStallFIN) && seq == 1:
			time.Sleep(s.stall)
		case sp.mode == modeStallGone && seq == 1:
			time.Sleep(s.stall)
			t := time.Now()
			_ = c.Close()
			return t, nil
		}
	}
	err = sc.Err()
	switch sp.mode {
	case modeNormal, modeClientStall:
		if err != nil || !done || seq != sp.events {
			return time.Time{}, fmt.Errorf("ended after %d of %d events, done=%v: %v", seq, sp.events, done, err)
		}
		// Nothing after the stream's end on the client connection.
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if b, err := br.Peek(1); len(b) > 0 {
			return time.Time{}, fmt.Errorf("bytes after the response: %q", b)
		} else if ne, ok := err.(net.Error); err != nil && err != io.EOF && !(ok && ne.Timeout()) {
			return time.Time{}, fmt.Errorf("after the response: %w", err)
		}
	case modeStallFIN:
		if done || seq != sp.events || err == nil {
			return time.Time{}, fmt.Errorf("engine closed after %d events: the client got %d, done=%v, %v (want a cut body)", sp.events, seq, done, err)
		}
	default: // the engine ended it early: exactly the events before that
		if done || seq != sp.at {
			return time.Time{}, fmt.Errorf("engine cut at %d but the client got %d events, done=%v (%v)", sp.at, seq, done, err)
		}
	}
	return time.Time{}, nil
}
