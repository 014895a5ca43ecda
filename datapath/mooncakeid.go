package datapath

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// The context-window reader (ctxwindow.go) also learns a vLLM Mooncake
// prefill's KV engine id, which a decode must name, from the prefill's
// bootstrap server (GET /query) when the endpoint has no kv_engine_id
// label (pd.LearnsMooncakeEngineID). An engine mints a new id when it
// restarts, so those reads repeat at least every engineIDRefresh; until
// the first read a request runs on its decode alone
// (mooncake_engine_id_unknown), as without a label. A failed handoff
// through a prefill (handoffFailed) also has its id read again before the
// prefill's next request (recheckEngineID), so a restart's new id is
// picked up at the first failure rather than at the next periodic read.

// engineIDRefresh is the longest pause between two reads of a Mooncake
// prefill's engine id.
const engineIDRefresh = 10 * time.Second

// engineIDRecheckEvery bounds the failure-driven re-reads: at most one per
// prefill per interval, however many requests fail meanwhile.
const engineIDRecheckEvery = time.Second

// engineIDRecheckTimeout bounds the re-read a request waits for (a
// restarting prefill's bootstrap server usually refuses at once).
const engineIDRecheckTimeout = 500 * time.Millisecond

// maxQueryBody caps a bootstrap /query answer (one small object per DP
// rank).
const maxQueryBody = 64 << 10

// learnsEngineIDs reports whether rule r has a Mooncake prefill whose
// engine id must be read from its bootstrap server.
func learnsEngineIDs(r *spec.Rule) bool {
	for i := range r.Endpoints {
		if pd.LearnsMooncakeEngineID(r, i) {
			return true
		}
	}
	return false
}

// KVEngineID is the engine id learned for the endpoint with ID id ("":
// none); the P/D dialects read it through pd.Request.EngineIDs.
func (c *compiled) KVEngineID(id string) string {
	if i := c.indexOf(id); i >= 0 {
		if p := c.eps[i].kvEngine.Load(); p != nil {
			return p.id
		}
	}
	return ""
}

// KVEngineRanks are the engines per DP rank the endpoint with ID id listed
// on its Mooncake bootstrap /query, from the same read as its KVEngineID
// (nil: not read, or a rank was unusable); the vLLM dialect pins a
// multi-rank prefill's leg to one of them (pd.EngineRankSource).
func (c *compiled) KVEngineRanks(id string) pd.MooncakeRanks {
	if i := c.indexOf(id); i >= 0 {
		if p := c.eps[i].kvEngine.Load(); p != nil {
			return p.ranks
		}
	}
	return nil
}

var _ pd.EngineRankSource = (*compiled)(nil)

// mooncakeEngines is one read of a Mooncake prefill's bootstrap /query:
// its engine id and its engines per DP rank, stored as one value so the
// two are never from different reads.
type mooncakeEngines struct {
	id    string
	ranks pd.MooncakeRanks
}

// readEngineIDs reads the engine id of each Mooncake prefill of c that
// has no label; a failed read keeps the last id.
func (rt *Runtime) readEngineIDs(ctx context.Context, c *compiled) {
	for i := range c.rule.Endpoints {
		if !pd.LearnsMooncakeEngineID(c.rule, i) {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, windowFetchTimeout)
		rt.readEngineID(fctx, c, i)
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}

// readEngineID reads endpoint i's engine id from its bootstrap server; a
// failed read keeps the last id.
func (rt *Runtime) readEngineID(ctx context.Context, c *compiled, i int) {
	se := c.rule.Endpoints[i]
	id, ranks, err := fetchEngineID(ctx, rt.probeClient, pd.MooncakeQueryURL(se))
	if err != nil {
		rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": se.ID, "error": err.Error()}).Debug("mooncake engine id not read; keeping the last one")
		return
	}
	// ranks nil when a rank is unusable: no DP pinning.
	if old := c.eps[i].kvEngine.Swap(&mooncakeEngines{id: id, ranks: ranks}); old == nil || old.id != id {
		rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": se.ID, "kv_engine_id": id}).Info("mooncake engine id learned from the prefill's bootstrap server")
	}
}

// engineIDCheck is an endpoint's request for a re-read of its learned
// engine id before its next request.
type engineIDCheck struct {
	due  atomic.Bool  // a handoff through this prefill failed since the last re-read
	last atomic.Int64 // when the last failure-driven re-read started (unix ns)
}

// handoffFailed is the rule for when a Mooncake request asks for its
// prefills' engine ids to be read again: the transfer was lost, or a leg
// failed in transport or answered 5xx (a restarting prefill refuses or
// dies; a decode that cannot find the named engine fails its pull when
// vLLM's kv_load_failure_policy is fail — under the default, recompute, it
// answers 200 and nothing on the wire tells). Legs infergate cancelled
// (other than timeouts) or that never left the pool queue do not count.
func handoffFailed(o *pd.Outcome) bool {
	if o.KVTransferFailed {
		return true
	}
	for _, l := range o.Legs {
		if l.PoolWait || l.Cancelled && !l.TimedOut {
			continue
		}
		if l.Err != nil || l.Status >= 500 {
			return true
		}
	}
	return false
}

// noteMooncakeOutcome marks each learning prefill a failed Mooncake
// request went through for a re-read (recheckEngineID).
func (c *compiled) noteMooncakeOutcome(o *pd.Outcome) {
	if o.Connector != pd.ConnectorMooncake || !handoffFailed(o) {
		return
	}
	for _, l := range o.Legs {
		if l.Phase != pd.PhasePrefill {
			continue
		}
		if i := c.indexOf(l.Endpoint.ID); i >= 0 && pd.LearnsMooncakeEngineID(c.rule, i) {
			c.eps[i].kvIDCheck.due.Store(true)
		}
	}
}

// recheckEngineID re-reads prefill i's engine id before a request uses it
// when a handoff through it failed since the last re-read, at most once per
// engineIDRecheckEvery (one request reads; others meanwhile use the last
// id). Without it a restarted prefill's new id would be named only after
// the next periodic read. Nothing failed: one atomic load.
func (rt *Runtime) recheckEngineID(ctx context.Context, c *compiled, i int) {
	chk := &c.eps[i].kvIDCheck
	if !chk.due.Load() {
		return
	}
	now, last := time.Now().UnixNano(), chk.last.Load()
	if now-last < int64(engineIDRecheckEvery) || !chk.last.CompareAndSwap(last, now) {
		return
	}
	chk.due.Store(false)
	fctx, cancel := context.WithTimeout(ctx, engineIDRecheckTimeout)
	defer cancel()
	rt.readEngineID(fctx, c, i)
}

// fetchEngineID GETs a Mooncake bootstrap server's /query and parses rank
// 0's engine id, and every rank's (pd.ParseMooncakeRanks; nil when one is
// unusable). The bootstrap server is plain HTTP (the engines' side
// channel), whatever the rule's engine TLS.
func fetchEngineID(ctx context.Context, hc *http.Client, url string) (string, pd.MooncakeRanks, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", nil, fmt.Errorf("query %s: %w", url, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("query %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("query %s: status %d", url, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxQueryBody+1))
	if err != nil {
		return "", nil, fmt.Errorf("query %s: %w", url, err)
	}
	id, ok := pd.ParseMooncakeQuery(body)
	if !ok || len(body) > maxQueryBody {
		return "", nil, fmt.Errorf("query %s: no usable engine id", url)
	}
	ranks, _ := pd.ParseMooncakeRanks(body)
	return id, ranks, nil
}
