package pdfake

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// A vLLM Mooncake prefill with data parallelism (Config.DPSize > 1) runs
// one engine per rank, each with its own KV engine id (vLLM suffixes the
// configured id with _dp<rank>), all listed by rank on the bootstrap
// server's GET /query with their workers' addresses. The API server places
// a request on the rank its X-data-parallel-rank header names, else on the
// rank its own balancer picks (here: round robin). A decode finds the
// engine its remote_engine_id names on /query and asks that engine's
// worker for the transfer: if another rank holds it, the pull fails, as
// the real one times out.

// headerDPRank is vLLM's per-request data-parallel rank header.
const headerDPRank = "X-data-parallel-rank"

// mooncakeDP is a DP prefill's placement of transfers on ranks.
type mooncakeDP struct {
	mu   sync.Mutex
	held map[string]int // transfer id → rank
	next int            // the API server's own balancer
}

// rankEngineID is rank r's KV engine id.
func (e *Engine) rankEngineID(r int) string {
	if e.cfg.DPSize <= 1 {
		return e.engineID
	}
	return e.engineID + "_dp" + strconv.Itoa(r)
}

// RankEngineID is the KV engine id of DP rank r of a Mooncake prefill.
func (e *Engine) RankEngineID(r int) string { return e.rankEngineID(r) }

// mooncakePlace puts a prefill leg's transfer on a rank: the header's, else
// the balancer's. false: the header names no rank of this engine (vLLM
// answers 400, recorded as a violation).
func (x *exchange) mooncakePlace(tid string) bool {
	e := x.e
	n := max(e.cfg.DPSize, 1)
	e.dp.mu.Lock()
	defer e.dp.mu.Unlock()
	rank := e.dp.next % n
	if h := x.r.Header.Get(headerDPRank); h != "" {
		r, err := strconv.Atoi(h)
		if err != nil || r < 0 || r >= n {
			return false
		}
		rank = r
	} else {
		e.dp.next++
	}
	if e.dp.held == nil {
		e.dp.held = map[string]int{}
	}
	e.dp.held[tid] = rank
	return true
}

// TransferRank is the rank a transfer was placed on (-1: none).
func (e *Engine) TransferRank(tid string) int {
	e.dp.mu.Lock()
	defer e.dp.mu.Unlock()
	if r, ok := e.dp.held[tid]; ok {
		return r
	}
	return -1
}

// mooncakeQueryBody is the bootstrap server's /query: one entry per rank;
// under DP each names its worker (this server's /worker/<rank>).
func (e *Engine) mooncakeQueryBody() map[string]any {
	if e.cfg.DPSize <= 1 {
		return map[string]any{"0": map[string]any{"engine_id": e.engineID}}
	}
	out := map[string]any{}
	for r := range e.cfg.DPSize {
		worker := "http://" + net.JoinHostPort(e.addr.Addr().String(), strconv.Itoa(int(e.bootPort))) + "/worker/" + strconv.Itoa(r)
		out[strconv.Itoa(r)] = map[string]any{"engine_id": e.rankEngineID(r), "worker_addr": map[string]any{"0": map[string]any{"0": worker}}}
	}
	return out
}

// serveMooncakeWorker is a rank's worker: 200 when the transfer is held
// on that rank, 404 otherwise.
func (e *Engine) serveMooncakeWorker(w http.ResponseWriter, r *http.Request) {
	rank, err := strconv.Atoi(r.PathValue("rank"))
	if err != nil || e.TransferRank(r.URL.Query().Get("transfer_id")) != rank {
		http.Error(w, "no such transfer on this rank", http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// mooncakePull asks a prefill's bootstrap server for its engines, as a
// Mooncake decode does, finds the one id names and, when it lists a
// worker, asks it for transfer tid.
func (e *Engine) mooncakePull(ctx context.Context, addr, id, tid string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(addr, "/")+"/query", nil)
	if err != nil {
		return err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("bootstrap %s: %w", addr, err)
	}
	defer resp.Body.Close()
	var ranks map[string]struct {
		EngineID string                       `json:"engine_id"`
		Workers  map[string]map[string]string `json:"worker_addr"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&ranks); err != nil {
		return fmt.Errorf("bootstrap %s: %w", addr, err)
	}
	for rank, r := range ranks {
		if r.EngineID != id {
			continue
		}
		worker := r.Workers["0"]["0"]
		if worker == "" {
			return nil
		}
		wreq, err := http.NewRequestWithContext(ctx, http.MethodGet, worker+"?transfer_id="+url.QueryEscape(tid), nil)
		if err != nil {
			return err
		}
		wresp, err := e.client.Do(wreq)
		if err != nil {
			return fmt.Errorf("rank %s worker: %w", rank, err)
		}
		wresp.Body.Close()
		if wresp.StatusCode != http.StatusOK {
			return fmt.Errorf("engine %q (rank %s) holds no transfer %s", id, rank, tid)
		}
		return nil
	}
	return fmt.Errorf("bootstrap %s has no engine %q", addr, id)
}
