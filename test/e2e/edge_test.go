package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEdgeFloodKeepsAPIAndProbes drives the built binary the way an attacker
// exhausts descriptors: the daemon runs with `ulimit -n 256` and 400
// keep-alive idle connections (one GET each, then silent) arrive from eight
// addresses. The management API must keep answering, the prober must still
// see an engine die and come back, and a new client must be served.
func TestEdgeFloodKeepsAPIAndProbes(t *testing.T) {
	bin := cliBuild(t)
	engineBin, _ := dpBuild(t)
	engine, vip := dpAddr(t), dpAddr(t)
	eng := dpStart(t, engine, engineBin, "-addr", engine, "-no-log")

	dir := t.TempDir()
	rule := fmt.Sprintf(`apiVersion: infergate/v1
kind: Loadbalancer
metadata: {name: edge}
spec:
  serviceArguments: {externalIP: %s, port: %s, protocol: tcp, sel: 0, mode: 4, probetype: http, probereq: /health, probeRetries: 1, probeTimeout: 1}
  endpoints:
    - {endpointIP: %s, targetPort: %s, weight: 1}
`, edgeHost(vip), edgePort(vip), edgeHost(engine), edgePort(engine))
	if err := os.WriteFile(filepath.Join(dir, "rule.yaml"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	daemon := cliStartDaemonNofile(t, bin, filepath.Join(dir, "state"), 256,
		"--rules", filepath.Join(dir, "rule.yaml"), "--evict-idle-after", "10ms", "--log-level", "warn")
	apiClient := &http.Client{Timeout: 5 * time.Second}
	metricsHas := func(line string) bool {
		resp, err := apiClient.Get(daemon.URL + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), line)
	}
	health := func(v int) string {
		return fmt.Sprintf(`infergate_datapath_endpoint_health_state{endpoint=%q,rule="edge"} %d`, engine, v)
	}
	eventually(t, 30*time.Second, "the rule to serve with its endpoint up", func() bool { return metricsHas(health(1)) })

	// The flood: 400 connections, each served one GET, then held open idle.
	var flood []net.Conn
	t.Cleanup(func() {
		for _, c := range flood {
			_ = c.Close()
		}
	})
	for i := range 400 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", 10+i%8))}, Timeout: 3 * time.Second}
		c, err := d.Dial("tcp", vip)
		if err != nil {
			continue // refused during the handshake
		}
		flood = append(flood, c)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil {
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
	for i := range 10 {
		resp, err := apiClient.Get(daemon.URL + "/netlox/v1/config/loadbalancer/all")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("management API call %d under the flood: %v %v", i, err, resp)
		}
		resp.Body.Close()
	}
	if !metricsHas(`infergate_edge_connections_refused_total{reason="global"}`) {
		t.Fatal("no global refusal series")
	}
	// The prober still has descriptors: it sees the engine die and return.
	_ = syscall.Kill(-eng.Process.Pid, syscall.SIGKILL)
	eventually(t, 30*time.Second, "the prober to see the killed engine down", func() bool { return metricsHas(health(2)) })
	dpStart(t, engine, engineBin, "-addr", engine, "-no-log")
	eventually(t, 30*time.Second, "the prober to see the restarted engine up", func() bool { return metricsHas(health(1)) })

	// A new client is served: its connection evicts a flood one idle longest.
	gd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: 3 * time.Second}
	good := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: gd.DialContext}}
	for i := range 10 {
		resp, err := good.Post("http://"+vip+"/v1/completions", "application/json", strings.NewReader(dpBody))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("good client request %d under the flood: %v %v", i, err, resp)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if metricsHas("infergate_edge_idle_evictions_total 0\n") {
		t.Fatal("no idle connection was evicted at the cap")
	}
}

func edgeHost(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func edgePort(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
