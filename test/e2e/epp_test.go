package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/test/eppconformance"
	"github.com/infergate/infergate/test/extprocclient"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// eppIPBase keeps this test's engine addresses apart from the other e2e
// tests' (127.0.0.170..).
const eppIPBase = 170

// TestEPPBinary starts the built binary as an endpoint picker over a CHWBL
// rule loaded from a file (--rules, --epp-rule) whose endpoints are engines
// on loopback, and drives --epp-addr with the black-box conformance client:
// what an Envoy-based gateway would see. It also checks the EPP's metric
// families are on the daemon's /metrics.
func TestEPPBinary(t *testing.T) {
	bin := cliBuild(t)
	var pool []string
	var eps strings.Builder
	for i := range 3 {
		e := startAffPlainEngine(t, fmt.Sprintf("127.0.0.%d", eppIPBase+1+i))
		pool = append(pool, e.addr)
		host, port, _ := net.SplitHostPort(e.addr)
		fmt.Fprintf(&eps, "    - {endpointIP: %s, targetPort: %s, weight: 1}\n", host, port)
	}
	rule := fmt.Sprintf(`apiVersion: infergate/v1
kind: Loadbalancer
metadata:
  name: epp-pool
spec:
  serviceArguments:
    externalIP: 127.0.0.%d
    port: %d
    protocol: tcp
    sel: 8
    mode: 4
    probetype: http
    probereq: /health
    chwbl_prefix_hash_level: 2
  endpoints:
%s`, eppIPBase, cliFreePort(t), eps.String())
	dir := t.TempDir()
	rules := filepath.Join(dir, "pool.yaml")
	if err := os.WriteFile(rules, []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	eppAddr := fmt.Sprintf("127.0.0.1:%d", cliFreePort(t))
	healthAddr := fmt.Sprintf("127.0.0.1:%d", cliFreePort(t))
	d := cliStartDaemon(t, bin, filepath.Join(dir, "state"), "--rules", rules,
		"--epp-addr", eppAddr, "--epp-health-addr", healthAddr, "--epp-rule", "epp-pool")

	// Probes make the engines usable shortly after boot; the suite's first
	// pick must not race them.
	eventually(t, 10*time.Second, "the rule's endpoints to pass their probes", func() bool {
		states, err := scrapeSamples(d.URL+"/metrics", `infergate_datapath_endpoint_health_state{`)
		healthy := 0
		for _, v := range states {
			if v == 1 { // metrics.HealthActive
				healthy++
			}
		}
		return err == nil && healthy == 3
	})

	// A gateway sends nothing before the EPP reports ready; neither does
	// the suite.
	hc, err := extprocclient.Dial(healthAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	eventually(t, 10*time.Second, "EPP readiness", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(hc).Check(ctx, &healthpb.HealthCheckRequest{Service: epp.HealthReadiness})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})

	eppconformance.Run(t, eppconformance.Target{
		Addr:                eppAddr,
		HealthAddr:          healthAddr,
		Pool:                pool,
		RefusalReasonHeader: epp.DefaultRefusalReasonHeader,
		Affinity:            true,
		// The daemon's own goroutine count (its registry carries the Go
		// collector), so "flat after cancelled and malformed streams" is
		// checked out of process as in the in-process run in datapath.
		Goroutines: func() (int, error) {
			n, err := scrapeMetric(d.URL+"/metrics", "go_goroutines ")
			return int(n), err
		},
	})
	if n, err := scrapeMetric(d.URL+"/metrics", `infergate_epp_streams_total{result="picked"}`); err != nil || n < 1 {
		t.Errorf("infergate_epp_streams_total{picked} on /metrics = %v, %v; want the EPP's families on the daemon registry", n, err)
	}
}

// scrapeMetric sums the samples on url whose line starts with prefix; no
// such sample is an error.
func scrapeMetric(url, prefix string) (float64, error) {
	vs, err := scrapeSamples(url, prefix)
	if err != nil {
		return 0, err
	}
	if len(vs) == 0 {
		return 0, fmt.Errorf("%s: no sample %q", url, prefix)
	}
	var sum float64
	for _, v := range vs {
		sum += v
	}
	return sum, nil
}

// scrapeSamples returns the values of the samples on url whose line starts
// with prefix.
func scrapeSamples(url, prefix string) ([]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var vs []float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, sc.Err()
}
