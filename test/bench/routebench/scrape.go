package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// series is one Prometheus text scrape: "name{labels}" → value (comments,
// and histogram buckets unless asked for, left out).
type series map[string]float64

func scrape(ctx context.Context, c *http.Client, url string, keep func(name string) bool) (series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	out := series{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		key := line[:i]
		name := key
		if j := strings.IndexByte(key, '{'); j >= 0 {
			name = key[:j]
		}
		if !keep(name) {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[key] = v
	}
	return out, sc.Err()
}

// sum adds every series of one metric name.
func (s series) sum(name string) float64 {
	t := 0.0
	for k, v := range s {
		if k == name || strings.HasPrefix(k, name+"{") {
			t += v
		}
	}
	return t
}

// delta is after − before for every series of after.
func delta(before, after series) series {
	out := series{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func vllmMetric(name string) bool {
	switch name {
	case "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:request_success_total",
		"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:prompt_tokens_total", "vllm:generation_tokens_total":
		return true
	}
	return false
}

// gatewayMetric keeps the families that explain routing decisions.
func gatewayMetric(name string) bool {
	for _, p := range []string{"infergate_ladder_decisions_total", "infergate_chwbl_", "loxilb_kv_local_tokenize_total",
		"loxilb_pd_kv_tokenize_cache_total", "loxilb_pd_kv_zero_hit_watchdog_total", "loxilb_kv_subscriber_connected",
		"loxilb_kv_events_applied_total", "loxilb_pd_kv_tier15_", "loxilb_kv_seq_gaps_total", "loxilb_kv_skipped_blocks_total", "loxilb_ai_pd_session_hits_total",
		gatewayRequests} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// fleetScrape scrapes every engine's vLLM counters.
func fleetScrape(ctx context.Context, c *http.Client, engines []string) ([]series, error) {
	out := make([]series, len(engines))
	errs := make([]error, len(engines))
	var wg sync.WaitGroup
	for i, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = scrapeRetry(ctx, c, e+"/metrics", vllmMetric, fleetScrapeTries, fleetScrapePause)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// An engine's metrics endpoint may fail one scrape and answer the next
// (llm-d's simulator answered 500 now and then on a loaded machine, which
// ended the whole bench): the counters are cumulative, so a scrape a moment
// later reads the same window.
const (
	fleetScrapeTries = 3
	fleetScrapePause = 250 * time.Millisecond
)

// scrapeRetry is scrape, tried up to tries times pause apart; the last error
// is returned.
func scrapeRetry(ctx context.Context, c *http.Client, url string, keep func(name string) bool, tries int, pause time.Duration) (series, error) {
	var err error
	for i := 0; i < tries; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(pause):
			}
		}
		var s series
		if s, err = scrape(ctx, c, url, keep); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// loadSampler samples every engine's running and waiting requests while a
// run lasts: the spread of work across the fleet.
type loadSampler struct {
	running, waiting []float64 // Σ over samples, per engine
	maxWaiting       float64
	samples          int
}

func sampleLoad(ctx context.Context, c *http.Client, engines []string, every time.Duration) *loadSampler {
	s := &loadSampler{running: make([]float64, len(engines)), waiting: make([]float64, len(engines))}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return s
		case <-t.C:
		}
		got, err := fleetScrape(ctx, c, engines)
		if err != nil {
			continue
		}
		for i, g := range got {
			s.running[i] += g.sum("vllm:num_requests_running")
			w := g.sum("vllm:num_requests_waiting")
			s.waiting[i] += w
			s.maxWaiting = max(s.maxWaiting, w)
		}
		s.samples++
	}
}
