package framingdiff

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath"
)

// The run's bounds: a fixed seed (the same shapes every run), how many
// shapes the generator makes, how long shapes keep being sent, and how
// long a connection may stay quiet before its outcome is read.
const (
	seed         = 20261202
	generated    = 320
	sendBudget   = 30 * time.Second
	workers      = 6
	quiet        = 400 * time.Millisecond
	recheckQuiet = 1500 * time.Millisecond
	maxRechecks  = 12
	settle       = 500 * time.Millisecond
)

// side is one front end under test with its own recording engine.
type side struct {
	name string
	addr string
	eng  *engine
}

// outcome is what one front end did with one shape.
type outcome struct {
	ans      answers
	err      error
	complete []wantReq // whole requests its engine received, in order
	partial  []wantReq // heads its engine received whose body never ended
	garbage  []string
}

func (o outcome) String() string {
	if o.err != nil {
		return "error: " + o.err.Error()
	}
	s := "answers " + o.ans.String()
	if len(o.complete) == 0 {
		s = "refused, " + s
	} else {
		s = fmt.Sprintf("forwarded %d %v, %s", len(o.complete), o.complete, s)
	}
	if len(o.partial) > 0 {
		s += fmt.Sprintf(", partial %v", o.partial)
	}
	if len(o.garbage) > 0 {
		s += fmt.Sprintf(", garbage %q", o.garbage)
	}
	return s
}

// send runs one shape against every side at once, on fresh connections,
// and collects what each engine received once everything settled.
func send(t *testing.T, sides []side, s shape, sid int, q time.Duration) []outcome {
	raw := withSID(s.raw, sid)
	outs := make([]outcome, len(sides))
	var wg sync.WaitGroup
	for i, sd := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i].ans, outs[i].err = exchange(sd.addr, raw, len(s.want), q)
		}()
	}
	wg.Wait()
	return outs
}

// collect fills outs with the engines' records of sid.
func collect(sides []side, s shape, sid int, outs []outcome) {
	for i, sd := range sides {
		for _, r := range sd.eng.take(sid) {
			r.req.path = strings.Replace(r.req.path, fmt.Sprintf("%06d", sid), sidMark, 1)
			r.req.body = withoutSID(r.req.body, sid)
			switch {
			case r.garbage != "":
				outs[i].garbage = append(outs[i].garbage, r.garbage)
			case r.partial:
				outs[i].partial = append(outs[i].partial, r.req)
			default:
				outs[i].complete = append(outs[i].complete, r.req)
			}
		}
	}
}

func withoutSID(s string, sid int) string {
	return strings.ReplaceAll(s, fmt.Sprintf("/v1/s%06d/", sid), "/v1/s"+sidMark+"/")
}

// judge compares one of our front ends (ours) with nginx (ng) on s and
// returns what is wrong: a request forwarded that the client did not send
// as one (a count or body that differs from s.want, anything of an
// ambiguous shape), a request nginx refused that we forwarded, bytes that
// are no request.
func judge(s shape, ng, ours outcome) []string {
	var bad []string
	if ours.err != nil {
		bad = append(bad, ours.err.Error())
	}
	for _, g := range ours.garbage {
		bad = append(bad, "engine read bytes that are no request: "+g)
	}
	for i, got := range ours.complete {
		if i >= len(s.want) || got != s.want[i] {
			bad = append(bad, fmt.Sprintf("engine received %v; the client sent %v", ours.complete, s.want))
			break
		}
	}
	if len(ours.complete) > len(ng.complete) {
		bad = append(bad, fmt.Sprintf("forwarded %d request(s) where nginx forwarded %d", len(ours.complete), len(ng.complete)))
	}
	if len(ours.partial) > 0 && len(ng.complete) == 0 {
		bad = append(bad, fmt.Sprintf("engine received the head of %v, which nginx refused", ours.partial))
	}
	return bad
}

// TestFramingDiff sends every shape (the published smuggling classes, then
// the generator's) to real nginx and to infergate's two plaintext front
// ends, each in front of its own recording engine, and holds both front
// ends to nginx: every shape nginx refuses we refuse, and whatever we forward is
// exactly what the client sent. Where nginx forwards and we refuse, the
// shape is listed (stricter is fine).
func TestFramingDiff(t *testing.T) {
	engN, engL, engH := startEngine(t, ipEngines), startEngine(t, ipEngines), startEngine(t, ipEngines)
	sides := []side{
		{"nginx", startNginx(t, engN.addr()), engN},
		{datapath.FrontEndLean, startInfergate(t, datapath.FrontEndLean, ipLean, engL.addr()), engL},
		{datapath.FrontEndNetHTTP, startInfergate(t, datapath.FrontEndNetHTTP, ipNetHTTP, engH.addr()), engH},
	}
	shapes := append(publishedClasses(), generate(seed, generated)...)

	start := time.Now()
	results := make([][]outcome, len(shapes))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = send(t, sides, shapes[i], i+1, quiet)
			}
		}()
	}
	sent := 0
	for ; sent < len(shapes) && time.Since(start) < sendBudget; sent++ {
		next <- sent
	}
	close(next)
	wg.Wait()
	time.Sleep(settle)
	for i := range sent {
		collect(sides, shapes[i], i+1, results[i])
	}
	t.Logf("sent %d of %d shapes (%d published classes, seed %d) in %v", sent, len(shapes), len(publishedClasses()), seed, time.Since(start).Round(time.Millisecond))
	if sent < len(publishedClasses()) {
		t.Errorf("only %d shapes sent within %v: not even the published classes", sent, sendBudget)
	}

	// A disagreement is sent once more, alone and with a longer quiet
	// wait, so a slow box does not pass for a framing difference.
	rechecks := 0
	stricter := map[string][]string{}
	for i := range sent {
		s, outs := shapes[i], results[i]
		for k := 1; k < len(sides); k++ {
			bad := judge(s, outs[0], outs[k])
			if len(bad) > 0 && rechecks < maxRechecks {
				rechecks++
				sid := 900000 + i
				again := send(t, sides, s, sid, recheckQuiet)
				time.Sleep(settle)
				collect(sides, s, sid, again)
				results[i], outs = again, again
				bad = judge(s, outs[0], outs[k])
			}
			for _, b := range bad {
				t.Errorf("%s on shape %d %q: %s\n  raw: %q\n  nginx: %v\n  %s: %v", sides[k].name, i+1, s.name, b, trim(s.raw), outs[0], sides[k].name, outs[k])
			}
			if len(bad) == 0 && len(outs[0].complete) > len(outs[k].complete) {
				stricter[sides[k].name] = append(stricter[sides[k].name], fmt.Sprintf("%d %q: nginx %v; %s %v", i+1, s.name, outs[0], sides[k].name, outs[k]))
			}
		}
		if outs := results[i]; len(outs[0].complete) > 0 && (s.ambiguous || fmt.Sprint(outs[0].complete) != fmt.Sprint(s.want[:min(len(s.want), len(outs[0].complete))])) {
			t.Logf("nginx itself forwarded %q as %v (client sent %v)", s.name, outs[0].complete, s.want)
		}
	}
	controls := 0
	for i := range sent {
		s := shapes[i]
		if !s.control {
			continue
		}
		controls++
		for k, sd := range sides {
			if got := results[i][k].complete; fmt.Sprint(got) != fmt.Sprint(s.want) {
				t.Errorf("%s did not forward control shape %d %q as sent (a run that forwards nothing proves nothing): %v, want %v", sd.name, i+1, s.name, results[i][k], s.want)
			}
		}
	}
	if controls == 0 {
		t.Errorf("no control shape was sent: nothing shows the front ends forward at all")
	}
	names := make([]string, 0, len(stricter))
	for n := range stricter {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("%s refuses %d shape(s) nginx forwards (stricter is allowed):\n  %s", n, len(stricter[n]), strings.Join(stricter[n], "\n  "))
	}
	for _, sd := range sides {
		for _, r := range sd.eng.stray() {
			if sd.name == "nginx" {
				t.Logf("nginx forwarded a request no shape owns: %+v", r)
				continue
			}
			t.Errorf("%s: the engine received what no shape sent: %+v", sd.name, r)
		}
	}
}

func trim(s string) string {
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("…(%d bytes)", len(s))
	}
	return s
}
