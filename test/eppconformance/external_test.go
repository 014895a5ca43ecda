package eppconformance

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestExternalEPP runs the suite against an EPP running elsewhere:
//
//	EPP_CONFORMANCE_ADDR=host:9002           ext_proc address (required; unset skips)
//	EPP_CONFORMANCE_HEALTH_ADDR=host:9003    gRPC health address
//	EPP_CONFORMANCE_POOL=ip:port,ip:port     the pool's endpoints (required)
//	EPP_CONFORMANCE_SHED=name=value          a request header that makes the EPP shed
//	EPP_CONFORMANCE_REASON_HEADER=name       the header carrying the 429 reason
//	EPP_CONFORMANCE_CAPACITY=8               picks the EPP holds at once before it sheds
//	EPP_CONFORMANCE_AFFINITY=1               the EPP keeps conversations on one endpoint
//	EPP_CONFORMANCE_METRICS_URL=http://…     Prometheus endpoint exposing go_goroutines
//	EPP_CONFORMANCE_STREAMS=1000             concurrent streams
//	EPP_CONFORMANCE_MAX_BODY=4194304         largest body sent (stay within the EPP's limit)
func TestExternalEPP(t *testing.T) {
	addr := os.Getenv("EPP_CONFORMANCE_ADDR")
	if addr == "" {
		t.Skip("EPP_CONFORMANCE_ADDR not set")
	}
	tg := Target{
		Addr:                addr,
		HealthAddr:          os.Getenv("EPP_CONFORMANCE_HEALTH_ADDR"),
		RefusalReasonHeader: os.Getenv("EPP_CONFORMANCE_REASON_HEADER"),
		Affinity:            os.Getenv("EPP_CONFORMANCE_AFFINITY") == "1",
	}
	for _, e := range strings.Split(os.Getenv("EPP_CONFORMANCE_POOL"), ",") {
		if e = strings.TrimSpace(e); e != "" {
			tg.Pool = append(tg.Pool, e)
		}
	}
	if kv := os.Getenv("EPP_CONFORMANCE_SHED"); kv != "" {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("EPP_CONFORMANCE_SHED=%q: want name=value", kv)
		}
		tg.ShedHeaders = map[string]string{strings.ToLower(k): v}
	}
	if n := os.Getenv("EPP_CONFORMANCE_CAPACITY"); n != "" {
		v, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("EPP_CONFORMANCE_CAPACITY=%q: %v", n, err)
		}
		tg.Capacity = v
	}
	if n := os.Getenv("EPP_CONFORMANCE_STREAMS"); n != "" {
		v, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("EPP_CONFORMANCE_STREAMS=%q: %v", n, err)
		}
		tg.Streams = v
	}
	if n := os.Getenv("EPP_CONFORMANCE_MAX_BODY"); n != "" {
		v, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("EPP_CONFORMANCE_MAX_BODY=%q: %v", n, err)
		}
		tg.MaxBody = v
	}
	if u := os.Getenv("EPP_CONFORMANCE_METRICS_URL"); u != "" {
		tg.Goroutines = func() (int, error) { return scrapeGoroutines(u) }
	}
	Run(t, tg)
}

// scrapeGoroutines reads go_goroutines from a Prometheus text exposition.
func scrapeGoroutines(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("scrape %s: go_goroutines %q: %w", url, v, err)
			}
			return int(f), nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	return 0, fmt.Errorf("scrape %s: no go_goroutines", url)
}
