package datapath

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/spec"
)

// TestFlowStatus: the rule's status and explanation show each endpoint's
// window against the requests holding it, and the queue's length, oldest
// wait and sheds; a rule without windows shows neither.
func TestFlowStatus(t *testing.T) {
	small, big := startGatedEngine(t), startGatedEngine(t)
	o := testOptions()
	o.Flow.QueueLength = 1
	o.Flow.MaxWait = 10 * time.Second
	eps := []spec.Endpoint{small.endpoint(t), big.endpoint(t)}
	eps[0].Window = 1
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, eps...)
	r.AdmissionWindow = 2
	rt, _ := installWithMetrics(t, o, r)
	c := testClient()

	// Both windows fill (1 + 2), one request queues, the next is shed.
	var outs []<-chan asyncResult
	for range 4 {
		outs = append(outs, postAsync(t, context.Background(), c, ruleURL(r)))
	}
	waitFor(t, 15*time.Second, "3 in the engines and 1 queued", func() bool {
		return small.cur.Load()+big.cur.Load() == 3 && rt.queueLen(r) == 1
	})
	if res := <-postAsync(t, context.Background(), c, ruleURL(r)); res.status != http.StatusServiceUnavailable {
		t.Fatalf("fifth request: %d, want a shed", res.status)
	}

	st, ok := rt.Status(r.Key)
	if !ok {
		t.Fatal("no status")
	}
	for _, tc := range []struct {
		id   string
		want spec.WindowStatus
	}{
		{eps[0].ID, spec.WindowStatus{Limit: 1, InFlight: 1, Full: true}},
		{eps[1].ID, spec.WindowStatus{Limit: 2, InFlight: 2, Full: true}},
	} {
		if got := st.Endpoints[tc.id].Window; got == nil || *got != tc.want {
			t.Errorf("endpoint %s window %+v, want %+v", tc.id, got, tc.want)
		}
	}
	q := st.Queue
	if q == nil || q.Queued != 1 || q.ByClass[flow.DefaultClass.String()] != 1 || q.OldestWaitSec <= 0 ||
		q.Shed[flow.ReasonQueueFull] != 1 || q.ShedTotal != 1 {
		t.Fatalf("queue status %+v: want 1 queued (default class), a positive oldest wait, one queue_full shed", q)
	}

	e, err := rt.Explain(context.Background(), r.Key, "/v1/completions", nil, []byte(completionBody))
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{e.Candidates[0].Window, e.Candidates[1].Window}; got[0] != "1/1,full" || got[1] != "2/2,full" {
		t.Errorf("explain windows %q, want 1/1,full and 2/2,full", got)
	}
	if e.Queue == nil || e.Queue.Queued != 1 {
		t.Errorf("explain queue %+v, want 1 queued", e.Queue)
	}

	for range 4 {
		small.gate <- struct{}{}
		big.gate <- struct{}{}
	}
	for _, ch := range outs {
		if res := <-ch; res.status != http.StatusOK {
			t.Fatalf("status %d: %s", res.status, res.body)
		}
	}
	waitFor(t, 5*time.Second, "the windows empty", func() bool {
		st, _ := rt.Status(r.Key)
		return st.Endpoints[eps[0].ID].Window.InFlight == 0 && st.Endpoints[eps[1].ID].Window.InFlight == 0
	})
	st, _ = rt.Status(r.Key)
	if w := st.Endpoints[eps[1].ID].Window; w.Full || st.Queue.Queued != 0 || st.Queue.OldestWaitSec != 0 || st.Queue.ShedTotal != 1 {
		t.Fatalf("after the drain: window %+v queue %+v", w, st.Queue)
	}

	// Without windows: no window, no queue.
	plain := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, startGatedEngine(t).endpoint(t))
	if err := rt.Install(nil, plain); err != nil {
		t.Fatal(err)
	}
	st, _ = rt.Status(plain.Key)
	e, _ = rt.Explain(context.Background(), plain.Key, "/v1/completions", nil, nil)
	if st.Queue != nil || st.Endpoints[plain.Endpoints[0].ID].Window != nil || e.Queue != nil || e.Candidates[0].Window != "" {
		t.Fatalf("a rule without windows shows flow state: %+v / %+v", st, e)
	}
}
