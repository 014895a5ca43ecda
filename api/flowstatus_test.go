package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
)

// TestFlowStatusViews: the datapath's window occupancy and queue reach
// …/status as objects and the LoxiLB-shaped GET as one-line summaries;
// without windows neither appears.
func TestFlowStatusViews(t *testing.T) {
	st := fakeStatus{}
	h := newHarness(t, true, st)
	mustCreate(t, h, ruleBody(t, nil))
	e := h.store.List()[0]
	full, part := e.Compiled.Endpoints[0].ID, e.Compiled.Endpoints[1].ID
	queue := &spec.QueueStatus{Queued: 3, ByClass: map[string]int{"low": 1, "standard": 0, "high": 2}, OldestWaitSec: 1.25,
		Shed: map[string]uint64{"queue_full": 4, "deadline": 1}, ShedTotal: 5}
	st[e.Compiled.Key] = spec.RuleStatus{Ready: true, Queue: queue, Endpoints: map[string]spec.EndpointStatus{
		full: {State: "active", Breaker: "closed", Window: &spec.WindowStatus{Limit: 2, InFlight: 2, Full: true}},
		part: {State: "active", Breaker: "closed", Window: &spec.WindowStatus{Limit: 4, InFlight: 1}},
	}}
	const status = lb + "/externalipaddress/10.0.0.1/port/8080/protocol/tcp/status"

	r := h.do(t, http.MethodGet, status, nil)
	var sv api.StatusView
	if r.status != http.StatusOK || json.Unmarshal(r.body, &sv) != nil {
		t.Fatalf("status: %d %s", r.status, r.body)
	}
	if w := sv.Endpoints[full].Window; w == nil || *w != (spec.WindowStatus{Limit: 2, InFlight: 2, Full: true}) {
		t.Errorf("window of %s = %+v: %s", full, w, r.body)
	}
	if q := sv.Queue; q == nil || q.Queued != 3 || q.ByClass["high"] != 2 || q.OldestWaitSec != 1.25 || q.Shed["queue_full"] != 4 || q.ShedTotal != 5 {
		t.Errorf("queue = %+v: %s", q, r.body)
	}

	r = h.do(t, http.MethodGet, lb+"/all", nil)
	var list rules.RuleList
	if json.Unmarshal(r.body, &list) != nil || len(list.LbAttr) != 1 {
		t.Fatal(string(r.body))
	}
	got := map[string]string{}
	for _, ep := range list.LbAttr[0].Endpoints {
		got[ep.EndpointIP+":"+itoa(ep.TargetPort)] = ep.WindowLoad
	}
	if got[full] != "2/2,full" || got[part] != "1/4" {
		t.Errorf("windowLoad %v, want %s 2/2,full and %s 1/4", got, full, part)
	}
	if q := list.LbAttr[0].Status.Queue; q != "queued=3,oldest=1.2s,shed=5" {
		t.Errorf("status.queue %q", q)
	}

	st[e.Compiled.Key] = spec.RuleStatus{Ready: true, Endpoints: map[string]spec.EndpointStatus{full: {State: "active", Breaker: "closed"}}}
	for _, path := range []string{status, lb + "/all"} {
		r = h.do(t, http.MethodGet, path, nil)
		for _, key := range []string{`"queue"`, `"window"`, `"windowLoad"`} {
			if strings.Contains(string(r.body), key) {
				t.Errorf("%s without windows shows %s: %s", path, key, r.body)
			}
		}
	}
}
