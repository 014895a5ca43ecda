package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
)

// validateJSON is the part of `validate -o json` the tests read.
type validateJSON struct {
	Passed bool `json:"passed"`
	Steps  []struct {
		Name    string   `json:"name"`
		Status  string   `json:"status"`
		Summary string   `json:"summary"`
		Hints   []string `json:"hints"`
	} `json:"steps"`
}

func (v validateJSON) step(name string) (status string, hints []string) {
	for _, s := range v.Steps {
		if s.Name == name {
			return s.Status, s.Hints
		}
	}
	return "", nil
}

// TestValidateOnDemo runs `infergate validate` against the demo: the 1P1D
// rule passes; the cache-aware KV-exact rule passes with --disruptive
// (Tier 1 and Tier 1.5 hits, each endpoint drained and restored, each
// failed and restored with its breaker opening); and with
// the 1P1D prefill engine killed the readiness step fails with the
// client-hangs hint and the command exits 1.
func TestValidateOnDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := cliBuild(t)
	d := demoStart(t, bin)
	demoServes(t, d.vip)

	t.Run("1P1D passes", func(t *testing.T) {
		res := cliRun(t, bin, d.api, "validate", demoRulePD)
		if res.Code != 0 {
			t.Fatalf("validate %s: exit %d\n%s\n%s", demoRulePD, res.Code, res.Stdout, res.Stderr)
		}
		for _, want := range []string{"PASS  role traffic (metrics)", "PASS  SSE request", "SKIP  KV-exact", "PASSED"} {
			if !strings.Contains(res.Stdout, want) {
				t.Errorf("output lacks %q:\n%s", want, res.Stdout)
			}
		}
	})

	t.Run("cache-aware rule disruptive json", func(t *testing.T) {
		res := cliRun(t, bin, d.api, "validate", demoRuleCache, "--disruptive", "-o", "json")
		var v validateJSON
		if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
			t.Fatalf("-o json: %v\n%s", err, res.Stdout)
		}
		for _, step := range []string{"rule shape", "endpoint readiness", "non-streaming request", "SSE request", "role traffic (metrics)", "cache-aware probe", "drain and restore", "fail and recover"} {
			if st, _ := v.step(step); st != "PASS" {
				t.Errorf("%s = %q, want PASS\n%s", step, st, res.Stdout)
			}
		}
		if !demoKVWired(t, d.api) {
			t.Errorf("the KV inventory lists no %s endpoint", demoRuleCache)
		}
		if st, _ := v.step("KV-exact"); st != "PASS" {
			t.Errorf("KV-exact = %q, want PASS\n%s", st, res.Stdout)
		}
	})

	t.Run("prefill engine killed", func(t *testing.T) {
		var victim demoEngineProc
		for _, e := range d.engines {
			if e.role == "prefill" && strings.HasPrefix(e.addr, "127.0.0.21:") {
				victim = e
			}
		}
		if victim.pid == 0 {
			t.Fatalf("no demo-1p1d prefill engine in %+v", d.engines)
		}
		if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// Bounded wait until the port refuses connections.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			resp, err := http.Get("http://" + victim.addr + "/health")
			if err != nil {
				break
			}
			resp.Body.Close()
			time.Sleep(50 * time.Millisecond)
		}
		res := cliRun(t, bin, d.api, "validate", demoRulePD, "-o", "json")
		if res.Code != 1 {
			t.Errorf("exit %d, want 1\n%s\n%s", res.Code, res.Stdout, res.Stderr)
		}
		var v validateJSON
		if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
			t.Fatalf("-o json: %v\n%s", err, res.Stdout)
		}
		st, hints := v.step("endpoint readiness")
		// The killed engine refuses connections: the most likely cause
		// (not running / wrong IP:port) comes first, then client hangs.
		if st != "FAIL" || len(hints) < 2 || !strings.Contains(hints[0], "engine not running or wrong IP:port") ||
			!strings.HasPrefix(hints[1], "client hangs") {
			t.Errorf("endpoint readiness = %s with hints %q, want FAIL with the engine-down hint, then client hangs", st, hints)
		}
		if v.Passed {
			t.Error("report passed with a dead prefill engine")
		}
		if st, _ := v.step("rule shape"); st != "PASS" {
			t.Errorf("rule shape = %s, want PASS (the rule itself is fine)", st)
		}
		if !strings.Contains(d.out.String(), victim.addr+" (prefill, pid") {
			t.Errorf("the demo did not report the dead engine %s", victim.addr)
		}
		// The client may still get 200 (decode recomputes the prompt); the
		// metric deltas must show that the prefill role handled nothing.
		if st, hints := v.step("role traffic (metrics)"); st != "FAIL" || len(hints) == 0 || !strings.HasPrefix(hints[0], "decode recomputes") {
			t.Errorf("role traffic = %s with hints %q, want FAIL with the decode-recomputes hint", st, hints)
		}
	})
}

// demoKVWired reports whether the daemon's KV inventory lists the demo's
// cache-aware rule, i.e. the KV-exact plane serves it.
func demoKVWired(t *testing.T, api string) bool {
	t.Helper()
	resp, err := http.Get(api + "/netlox/v1/config/ai/kv/inventory")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var inv struct {
		Rows []struct {
			Rule string `json:"rule"`
		} `json:"rows"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&inv) != nil {
		return false
	}
	for _, r := range inv.Rows {
		if r.Rule == demoRuleCache {
			return true
		}
	}
	return false
}

// TestValidateKVParityOnDemo: the demo's cache-aware rule with a kvBlockSize
// (32) other than the engines' (16) serves, but the KV-exact step WARNs with
// the parity hint and names the block size; nothing FAILs.
func TestValidateKVParityOnDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := cliBuild(t)
	d := demoStart(t, bin, "--kv-block-size", "32")
	demoServes(t, d.vip)
	if !demoKVWired(t, d.api) {
		t.Fatalf("the KV inventory lists no %s endpoint", demoRuleCache)
	}
	// Twice: the gateway learns the engines' block size from their events
	// and keys with it, so once the first run has populated the inventory
	// Tier 1.5 hits; the mismatch must still be reported.
	for run := 1; run <= 2; run++ {
		res := cliRun(t, bin, d.api, "validate", demoRuleCache, "-o", "json")
		var v validateJSON
		if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
			t.Fatalf("run %d -o json: %v\n%s", run, err, res.Stdout)
		}
		st, hints := v.step("KV-exact")
		summary := ""
		for _, s := range v.Steps {
			if s.Name == "KV-exact" {
				summary = s.Summary
			}
		}
		if st != "WARN" || len(hints) == 0 || !strings.HasPrefix(hints[0], "KV-exact hits stay zero") || !strings.Contains(summary, "kvBlockSize 32") {
			t.Errorf("run %d: KV-exact = %s %q hints %q, want WARN naming kvBlockSize 32 with the KV parity hint\n%s", run, st, summary, hints, res.Stdout)
		}
		if res.Code != 0 {
			t.Errorf("run %d: exit %d, want 0 (a parity WARN is not a failure)\n%s", run, res.Code, res.Stdout)
		}
	}
}

// TestValidateSinglePoolDisruptive runs the whole workflow, --disruptive
// included, against the real daemon serving a round-robin rule over two
// fake engines: every applicable step passes, each endpoint is drained and
// restored, each is failed (its port replaced by a refusing one) and
// restored, and the stored rule ends exactly as it started. With cb_enable
// the failed endpoint's breaker opens (PASS); without breakers its peers
// still serve every request, but the dead endpoint stays in rotation (WARN).
func TestValidateSinglePoolDisruptive(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := cliBuild(t)
	for _, tc := range []struct {
		name     string
		breakers bool
		fail     string
	}{
		{"without breakers", false, "WARN"},
		{"cb_enable", true, "PASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := cliStartDaemon(t, bin, t.TempDir())
			validatePoolRule(t, bin, d.URL, 0, tc.breakers)
			before := configOnly(t, cliMust(t, bin, d.URL, "get", "lb", "-o", "json"))

			res := cliRun(t, bin, d.URL, "validate", "pool", "--disruptive", "-o", "json")
			var v validateJSON
			if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
				t.Fatalf("-o json: %v\n%s\n%s", err, res.Stdout, res.Stderr)
			}
			want := map[string]string{
				"rule shape": "PASS", "endpoint readiness": "PASS", "runtime status": "PASS",
				"non-streaming request": "PASS", "SSE request": "PASS", "role traffic (metrics)": "PASS",
				"cache-aware probe": "SKIP", "KV-exact": "SKIP", "drain and restore": "PASS",
				"fail and recover": tc.fail,
			}
			for step, st := range want {
				if got, _ := v.step(step); got != st {
					t.Errorf("%s = %q, want %s\n%s", step, got, st, res.Stdout)
				}
			}
			if res.Code != 0 || !v.Passed {
				t.Errorf("exit %d, passed %v\n%s", res.Code, v.Passed, res.Stdout)
			}
			if after := configOnly(t, cliMust(t, bin, d.URL, "get", "lb", "-o", "json")); after != before {
				t.Errorf("rule not restored exactly:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// validatePoolRule applies rule "pool": round robin over two fake engines
// on 127.0.0.1 answering after latency, with circuit breakers when
// breakers is set.
func validatePoolRule(t *testing.T, bin, api string, latency time.Duration, breakers bool) {
	t.Helper()
	var eps []string
	for _, name := range []string{"a", "b"} {
		s, err := fakeengine.Start(fakeengine.Options{Name: name, Latency: latency})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		eps = append(eps, fmt.Sprintf("    - {endpointIP: 127.0.0.1, targetPort: %d, weight: 1}", s.Port()))
	}
	vipPort := cliFreePort(t)
	rule := fmt.Sprintf(`apiVersion: infergate/v1
kind: Loadbalancer
metadata:
  name: pool
spec:
  serviceArguments: {externalIP: 127.0.0.1, port: %d, protocol: tcp, sel: 0, mode: 4, sse_mode: true, cb_enable: %t}
  endpoints:
%s
`, vipPort, breakers, strings.Join(eps, "\n"))
	file := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(file, []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	cliMust(t, bin, api, "apply", "-f", file)
}

// poolDrained reports whether the stored "pool" rule has an endpoint at weight 0.
func poolDrained(t *testing.T, api string) bool {
	t.Helper()
	resp, err := http.Get(api + "/netlox/v1/config/loadbalancer/all")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		LbAttr []struct {
			Endpoints []struct {
				Weight int `json:"weight"`
			} `json:"endpoints"`
		} `json:"lbAttr"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	for _, r := range list.LbAttr {
		for _, e := range r.Endpoints {
			if e.Weight == 0 {
				return true
			}
		}
	}
	return false
}

// TestValidateInterruptRestores: Ctrl-C while validate --disruptive holds an
// endpoint drained still restores the rule before the command exits.
func TestValidateInterruptRestores(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := cliBuild(t)
	d := cliStartDaemon(t, bin, t.TempDir())
	validatePoolRule(t, bin, d.URL, 500*time.Millisecond, false) // slow answers keep the drain open
	before := configOnly(t, cliMust(t, bin, d.URL, "get", "lb", "-o", "json"))

	cmd := exec.Command(bin, "--server", d.URL, "validate", "pool", "--disruptive", "--request-timeout", "20s")
	out := &cliSyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}) // closed once the process has been waited for
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(cliStopTimeout):
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !poolDrained(t, d.URL) {
		if time.Now().After(deadline) {
			t.Fatalf("validate never drained an endpoint:\n%s", out.String())
		}
		time.Sleep(cliPollInterval)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(cliStopTimeout):
		t.Fatalf("validate did not exit %v after SIGINT:\n%s", cliStopTimeout, out.String())
	}
	if after := configOnly(t, cliMust(t, bin, d.URL, "get", "lb", "-o", "json")); after != before {
		t.Errorf("rule not restored after Ctrl-C:\nbefore %s\nafter  %s\n%s", before, after, out.String())
	}
	for _, want := range []string{"SKIP  drain and restore: interrupted; every drained endpoint was restored", "INTERRUPTED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("exit %d after an interrupt, want 1", cmd.ProcessState.ExitCode())
	}
}
