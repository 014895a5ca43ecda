package datapath

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
// (mooncake_engine_id_unknown), as without a label.

// engineIDRefresh is the longest pause between two reads of a Mooncake
// prefill's engine id.
const engineIDRefresh = 10 * time.Second

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
	for _, ep := range c.eps {
		if ep.id == id {
			if p := ep.kvEngineID.Load(); p != nil {
				return *p
			}
			return ""
		}
	}
	return ""
}

// readEngineIDs reads the engine id of each Mooncake prefill of c that
// has no label; a failed read keeps the last id.
func (rt *Runtime) readEngineIDs(ctx context.Context, c *compiled) {
	for i, se := range c.rule.Endpoints {
		if !pd.LearnsMooncakeEngineID(c.rule, i) {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, windowFetchTimeout)
		id, ranks, err := fetchEngineID(fctx, rt.probeClient, pd.MooncakeQueryURL(se))
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": se.ID, "error": err.Error()}).Debug("mooncake engine id not read; keeping the last one")
			continue
		}
		c.eps[i].kvEngineRanks.Store(&ranks) // nil when a rank is unusable: no DP pinning
		if old := c.eps[i].kvEngineID.Swap(&id); old == nil || *old != id {
			rt.log.WithFields(logrus.Fields{"rule": c.label, "endpoint": se.ID, "kv_engine_id": id}).Info("mooncake engine id learned from the prefill's bootstrap server")
		}
	}
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
