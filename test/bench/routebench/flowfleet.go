package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/test/enginesim"
)

// The flow-control scenarios on engines someone else runs (--engines-at):
// nothing of their timing is known here, so the fleet's capacity is
// measured and its batch limit read from the engines, and the windowed arm
// takes its windows the way an operator's gateway would, learned from the
// engines (--engine-learn-windows) on a second gateway, so the round-robin
// arm on the main one keeps no window at all.

// fcFleet is what the flow-control scenarios know of the fleet.
type fcFleet struct {
	capacity float64 // requests per second the fleet completes with every batch full
	window   int     // each engine's batch limit: the windowed arm's window
	how      string  // how capacity was found, for the report
}

// fcFleetOf models the simulated fleet (enginesim's defaults) or measures
// engines someone else runs.
func (b *bench) fcFleetOf(ctx context.Context) (fcFleet, error) {
	if b.cfg.enginesAt == "" {
		// Engine time per request is its prefill plus its share of a full
		// batch's decode steps (enginesim prefills one request at a time).
		eo := enginesim.DefaultOptions()
		per := eo.PrefillOverhead + fcPrompt*eo.PrefillPerToken +
			time.Duration(fcOutput)*time.Duration(float64(eo.DecodeStep)*eo.LoadFactor)/time.Duration(eo.MaxNumSeqs)
		return fcFleet{capacity: float64(len(b.engines)) / per.Seconds(), window: eo.MaxNumSeqs, how: "modelled"}, nil
	}
	window, err := b.fcBatchLimit(ctx)
	if err != nil {
		return fcFleet{}, err
	}
	if err := b.fcDrain(ctx, 30*time.Second); err != nil {
		return fcFleet{}, err
	}
	capacity, err := b.fcMeasureCapacity(ctx, window, 2*time.Second, 6*time.Second)
	if err != nil {
		return fcFleet{}, err
	}
	return fcFleet{capacity: capacity, window: window, how: "measured: requests in flight at the batch limit over their mean time"}, nil
}

// fcBatchLimit is the smallest batch limit the engines report in
// llm-d-inference-sim's GET /admin/config (max-num-seqs), the answer the
// gateway's --engine-learn-windows reads from that engine too.
func (b *bench) fcBatchLimit(ctx context.Context) (int, error) {
	limit := 0
	for _, e := range b.engines {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e+"/admin/config", nil)
		resp, err := b.scrapeC.Do(req)
		if err != nil {
			return 0, fmt.Errorf("batch limit of %s: %w", e, err)
		}
		var cfg struct {
			MaxNumSeqs int `json:"max-num-seqs"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&cfg)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || cfg.MaxNumSeqs <= 0 {
			return 0, fmt.Errorf("batch limit of %s: GET /admin/config gave status %d, max-num-seqs %d (%v): the flow-control scenarios need an engine that reports it", e, resp.StatusCode, cfg.MaxNumSeqs, err)
		}
		if limit == 0 || cfg.MaxNumSeqs < limit {
			limit = cfg.MaxNumSeqs
		}
	}
	return limit, nil
}

// fcMeasureCapacity keeps window requests of the scenarios' shape in
// flight on every engine, straight (no gateway), and times those that
// finish in the measured span after warm. The fleet's throughput with every
// batch full and nothing queued (100 % load) is then, by Little's law, the
// requests in flight over their mean time: counting completions instead
// would alias with the batches, which start together and finish in waves.
func (b *bench) fcMeasureCapacity(ctx context.Context, window int, warm, span time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, warm+span)
	defer cancel()
	from := time.Now().Add(warm)
	var mu sync.Mutex
	var took time.Duration
	var done, failed int
	var seq atomic.Uint64
	var wg sync.WaitGroup
	for _, e := range b.engines {
		for range window {
			wg.Go(func() {
				for ctx.Err() == nil {
					rng := seeded(b.cfg.seed+11, seq.Add(1))
					prompt := b.text.text(rng, fcPrompt)
					t0 := time.Now()
					ok := b.fcDirect(ctx, e, prompt)
					d := time.Since(t0)
					mu.Lock()
					switch {
					case !ok && ctx.Err() == nil:
						failed++
					case ok && t0.After(from):
						done++
						took += d
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if failed > 0 || done == 0 {
		return 0, fmt.Errorf("capacity probe: %d answered in %v, %d failed", done, span, failed)
	}
	// Requests cut at the end leave the engines' queues: wait them out.
	if err := b.fcDrain(context.WithoutCancel(ctx), 30*time.Second); err != nil {
		return 0, err
	}
	mean := took / time.Duration(done)
	return float64(len(b.engines)*window) / mean.Seconds(), nil
}

// fcDirect sends one unstreamed request of the scenarios' shape to engine
// e and reports whether it was answered 200.
func (b *bench) fcDirect(ctx context.Context, e, prompt string) bool {
	body, _ := json.Marshal(fcBody(b.cfg.model, prompt, false))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e+pathCompletions, bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// fcBody is every flow-control request: fcOutput tokens exactly
// (ignore_eos: engines that draw an answer's length would otherwise vary
// the load between arms).
func fcBody(model, prompt string, stream bool) map[string]any {
	return map[string]any{"model": model, "prompt": prompt, "max_tokens": fcOutput, "ignore_eos": true, "stream": stream}
}

// fcDrain waits until no engine runs or queues a request (those cut by the
// previous arm's client may still be running): every arm starts on an idle
// fleet.
func (b *bench) fcDrain(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := fleetScrape(ctx, b.scrapeC, b.engines)
		busy := 0.0
		for _, g := range got {
			busy += g.sum("vllm:num_requests_running") + g.sum("vllm:num_requests_waiting")
		}
		if err == nil && busy == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("fleet not idle after %v (%.0f requests running or waiting, %v)", timeout, busy, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// fcServeLearned serves the windowed arm on a second gateway started with
// --engine-learn-windows: least connections, no configured window, each
// endpoint's window read from its engine. It waits until every endpoint's
// learned window is want; stop ends the gateway.
func (b *bench) fcServeLearned(ctx context.Context, want int) (stop func(), err error) {
	logf, err := os.Create(filepath.Join(b.dir, "gateway-learned.log"))
	if err != nil {
		return nil, err
	}
	g, stopGateway, err := b.startSideGateway("learned-window", b.cfg.gatewayBin, logf, []string{"--engine-learn-windows"})
	if err != nil {
		logf.Close()
		return nil, err
	}
	stop = func() {
		stopGateway()
		logf.Close()
	}
	vip := b.vipAt(vipOffsetLearned)
	rule := armRule(armLeast, vip.String(), b.cfg.vipPort, b.engines, b.cfg.zmqPort, nil)
	rule["serviceArguments"].(map[string]any)["name"] = "bench-" + armWindowed
	if err := b.serveRule(ctx, g, armWindowed, vip, rule); err != nil {
		stop()
		return nil, err
	}
	if err := b.waitLearned(ctx, g, vip, want, 20*time.Second); err != nil {
		stop()
		return nil, fmt.Errorf("arm %s: %w", armWindowed, err)
	}
	return stop, nil
}

// waitLearned polls the rule's /status until every endpoint shows a
// learned window of want.
func (b *bench) waitLearned(ctx context.Context, g *gateway, vip netip.Addr, want int, timeout time.Duration) error {
	url := fmt.Sprintf("%s/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp/status", g.api, vip, b.cfg.vipPort)
	deadline := time.Now().Add(timeout)
	var last string
	for {
		var st struct {
			Endpoints map[string]struct {
				Window *struct {
					Limit  int    `json:"limit"`
					Source string `json:"source"`
				} `json:"window"`
			} `json:"endpoints"`
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := b.scrapeC.Do(req)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		learned, sources := 0, map[string]bool{}
		for ep, s := range st.Endpoints {
			if s.Window != nil && s.Window.Limit == want && s.Window.Source != "" {
				learned++
				sources[s.Window.Source] = true
			} else if s.Window != nil {
				last = fmt.Sprintf("%s window %d (%s)", ep, s.Window.Limit, s.Window.Source)
			}
		}
		if err == nil && learned == len(b.engines) {
			fmt.Fprintf(b.report, "  windowed arm: every endpoint's window learned by the gateway: %d from %v\n", want, slices.Sorted(maps.Keys(sources)))
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d of %d endpoints learned a window of %d within %v (last: %s, %v)", learned, len(b.engines), want, timeout, last, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
