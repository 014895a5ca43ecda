package e2e

// End-to-end tests of the `infergate` binary: the real CLI driving a real
// `infergate serve` subprocess over loopback, including a crash (SIGKILL)
// during a burst of writes and a restart on the same state directory.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/rules"
)

// cliListRules reads the rule set through `get lb -o json`.
func cliListRules(t *testing.T, bin, server string) []rules.Rule {
	t.Helper()
	var list rules.RuleList
	out := cliMust(t, bin, server, "get", "lb", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("get lb -o json: %v\n%s", err, out)
	}
	return list.LbAttr
}

// cliLines splits output into non-empty lines.
func cliLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// cliCheckApplyLines asserts one "<source> <vip>:<port>/<proto> <verb>" line
// per rule, in order, each ending in want.
func cliCheckApplyLines(t *testing.T, out string, sources []string, want string) {
	t.Helper()
	lines := cliLines(out)
	if len(lines) != len(sources) {
		t.Fatalf("%d output lines, want %d:\n%s", len(lines), len(sources), out)
	}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != sources[i] || f[2] != want {
			t.Errorf("line %d = %q, want %q <rule> %s", i, l, sources[i], want)
		}
	}
}

func TestCLIEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := cliBuild(t)
	state := t.TempDir()
	d := cliStartDaemon(t, bin, state)
	multi := filepath.Join(cliRepoRoot(t), "configs", "multi.yaml")
	multiSources := []string{multi + "#1", multi + "#2", multi + "#3"}

	t.Run("apply is idempotent", func(t *testing.T) {
		cliCheckApplyLines(t, cliMust(t, bin, d.URL, "apply", "-f", multi), multiSources, "created")
		cliCheckApplyLines(t, cliMust(t, bin, d.URL, "apply", "-f", multi), multiSources, "unchanged")
	})

	t.Run("a rejected rule fails apply after the rest is applied", func(t *testing.T) {
		good := func(ip string) string {
			return fmt.Sprintf(`apiVersion: infergate/v1
kind: Loadbalancer
spec:
  serviceArguments: {externalIP: %s, port: 8080, protocol: tcp, mode: 4, name: e2e-partial}
  endpoints:
    - {endpointIP: 127.0.0.21, targetPort: 8000, weight: 1}
`, ip)
		}
		// P/D with two prefill endpoints and no decode: decodes fine, the
		// server's cross-field validation rejects it.
		bad := `apiVersion: infergate/v1
kind: Loadbalancer
spec:
  serviceArguments: {externalIP: 127.0.0.31, port: 8080, protocol: tcp, mode: 4, pd_disagg_mode: true}
  endpoints:
    - {endpointIP: 127.0.0.21, targetPort: 8000, weight: 1, ep_role: 1}
    - {endpointIP: 127.0.0.22, targetPort: 8000, weight: 1, ep_role: 1}
`
		f := filepath.Join(t.TempDir(), "partial.yaml")
		if err := os.WriteFile(f, []byte(good("127.0.0.30")+"---\n"+bad+"---\n"+good("127.0.0.32")), 0o600); err != nil {
			t.Fatal(err)
		}
		res := cliRun(t, bin, d.URL, "apply", "-f", f)
		if res.Code != 1 {
			t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
		}
		for _, want := range []string{f + "#2 127.0.0.31:8080/tcp rejected", "pd-disagg requires at least 1 prefill",
			"error_code: invalid_combination", "field:      endpoints"} {
			if !strings.Contains(res.Stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, res.Stderr)
			}
		}
		cliCheckApplyLines(t, res.Stdout, []string{f + "#1", f + "#3"}, "created")
		vips := map[string]bool{}
		for _, r := range cliListRules(t, bin, d.URL) {
			vips[r.ServiceArguments.ExternalIP] = true
		}
		if !vips["127.0.0.30"] || !vips["127.0.0.32"] || vips["127.0.0.31"] {
			t.Fatalf("stored VIPs %v: want .30 and .32, not .31", vips)
		}
	})

	t.Run("get -o yaml round-trips through apply unchanged", func(t *testing.T) {
		out := cliMust(t, bin, d.URL, "get", "lb", "-o", "yaml")
		f := filepath.Join(t.TempDir(), "dump.yaml")
		if err := os.WriteFile(f, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		n := len(cliListRules(t, bin, d.URL))
		if n < 5 {
			t.Fatalf("only %d rules stored", n)
		}
		var sources []string
		for i := 1; i <= n; i++ {
			sources = append(sources, fmt.Sprintf("%s#%d", f, i))
		}
		cliCheckApplyLines(t, cliMust(t, bin, d.URL, "apply", "-f", f), sources, "unchanged")
	})

	t.Run("create lb with roles and NIXL ports, then delete", func(t *testing.T) {
		out := cliMust(t, bin, d.URL, "create", "lb", "127.0.0.40", "--tcp=8080:8100", "--mode=fullproxy", "--pd-disagg",
			"--endpoints=127.0.0.41:1,127.0.0.42:2", "--ep-role=prefill,decode", "--nixl-port=5600,5601", "--name=e2e-pd")
		if strings.TrimSpace(out) != "created" {
			t.Fatalf("create printed %q", out)
		}
		var got *rules.Rule
		for _, r := range cliListRules(t, bin, d.URL) {
			if r.ServiceArguments.Name == "e2e-pd" {
				got = &r
			}
		}
		if got == nil || !got.ServiceArguments.PDDisaggMode || len(got.Endpoints) != 2 {
			t.Fatalf("stored rule %+v", got)
		}
		for i, want := range []rules.Endpoint{
			{EndpointIP: "127.0.0.41", TargetPort: 8100, Weight: 1, EPRole: 1, NixlPort: 5600},
			{EndpointIP: "127.0.0.42", TargetPort: 8100, Weight: 2, EPRole: 2, NixlPort: 5601},
		} {
			ep := got.Endpoints[i]
			ep.State, ep.Counter, ep.Health, ep.EngineLoad = "", "", "", ""
			if !reflect.DeepEqual(ep, want) {
				t.Errorf("endpoint %d = %+v, want %+v", i, ep, want)
			}
		}
		comp := cliMust(t, bin, d.URL, "get", "lb", "127.0.0.40", "--tcp=8080", "--compiled")
		if !json.Valid([]byte(comp)) || !strings.Contains(comp, "e2e-pd") {
			t.Fatalf("compiled rule: %s", comp)
		}
		if res := cliRun(t, bin, d.URL, "create", "lb", "127.0.0.40", "--tcp=8080:8100", "--endpoints=127.0.0.41:1",
			"--ep-role=prefill,decode"); res.Code != 2 || !strings.Contains(res.Stderr, "--ep-role count (2) must match --endpoints count (1)") {
			t.Fatalf("misaligned roles: exit %d stderr %s", res.Code, res.Stderr)
		}

		if out := cliMust(t, bin, d.URL, "delete", "lb", "127.0.0.40", "--tcp=8080"); strings.TrimSpace(out) != "Success" {
			t.Fatalf("delete printed %q", out)
		}
		if res := cliRun(t, bin, d.URL, "get", "lb", "127.0.0.40", "--tcp=8080"); res.Code != 1 || !strings.Contains(res.Stderr, "404") {
			t.Fatalf("get after delete: exit %d stderr %s", res.Code, res.Stderr)
		}
		if res := cliRun(t, bin, d.URL, "delete", "lb", "127.0.0.40", "--tcp=8080"); res.Code != 1 || !strings.Contains(res.Stderr, "rule_not_found") {
			t.Fatalf("second delete: exit %d stderr %s", res.Code, res.Stderr)
		}
	})

	t.Run("delete by name and delete -f by full key", func(t *testing.T) {
		cliMust(t, bin, d.URL, "delete", "lb", "--name=e2e-partial")
		cliCheckApplyLines(t, cliMust(t, bin, d.URL, "delete", "-f", multi), multiSources, "deleted")
		for _, r := range cliListRules(t, bin, d.URL) {
			sa := r.ServiceArguments
			if sa.Name == "e2e-partial" || sa.ExternalIP == "127.0.0.16" {
				t.Errorf("rule %s %s:%d survived delete", sa.Name, sa.ExternalIP, sa.Port)
			}
		}
	})

	t.Run("every example applies and deletes cleanly", func(t *testing.T) {
		dir := filepath.Join(cliRepoRoot(t), "configs")
		out := cliMust(t, bin, d.URL, "apply", "-f", dir)
		lines := cliLines(out)
		if len(lines) < 9 {
			t.Fatalf("only %d rules applied from %s:\n%s", len(lines), dir, out)
		}
		for _, l := range lines {
			if !strings.HasSuffix(l, " created") {
				t.Errorf("apply line %q, want created", l)
			}
		}
		out = cliMust(t, bin, d.URL, "delete", "-f", dir)
		if n := strings.Count(out, " deleted\n"); n != len(lines) {
			t.Fatalf("deleted %d of %d rules:\n%s", n, len(lines), out)
		}
	})

	t.Run("every invalid example is refused with its expected error", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join(cliRepoRoot(t), "configs", "invalid", "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no invalid examples: %v", err)
		}
		before := len(cliListRules(t, bin, d.URL))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// "# expect: <status> <error_code> <field>": the CLI prints the
			// code and field whether the loader or the server refused it.
			first, _, _ := strings.Cut(string(raw), "\n")
			exp := strings.Fields(strings.TrimPrefix(first, "# expect:"))
			if len(exp) != 3 {
				t.Fatalf("%s: bad expect line %q", f, first)
			}
			res := cliRun(t, bin, d.URL, "apply", "-f", f)
			if res.Code != 1 {
				t.Errorf("%s: exit %d, want 1\n%s", filepath.Base(f), res.Code, res.Stderr)
				continue
			}
			for _, want := range exp[1:] {
				if !strings.Contains(res.Stderr, want) {
					t.Errorf("%s: stderr lacks %q:\n%s", filepath.Base(f), want, res.Stderr)
				}
			}
		}
		if after := len(cliListRules(t, bin, d.URL)); after != before {
			t.Fatalf("invalid examples changed the rule set: %d rules before, %d after", before, after)
		}
	})

	t.Run("every acknowledged write survives SIGKILL", func(t *testing.T) {
		acked := cliBurstAndKill(t, d)
		d2 := cliStartDaemon(t, bin, state)
		stored := map[string]bool{}
		for _, r := range cliListRules(t, bin, d2.URL) {
			stored[fmt.Sprintf("%s:%d", r.ServiceArguments.ExternalIP, r.ServiceArguments.Port)] = true
		}
		for _, k := range acked {
			if !stored[k] {
				t.Errorf("acknowledged rule %s lost after restart", k)
			}
		}
		t.Logf("%d acknowledged writes, all present after restart", len(acked))
	})
}

// Burst shape: at most cliBurstMax writes; the daemon is killed once
// cliBurstKillAfter of them are acknowledged, while writers are running.
const (
	cliBurstMax       = 400
	cliBurstKillAfter = 25
	cliBurstWriters   = 4
	cliBurstVIP       = "127.0.0.90"
	cliBurstBasePort  = 20000
)

// cliBurstAndKill applies rules from several writers, SIGKILLs the daemon
// mid-burst and returns the keys ("vip:port") the server acknowledged.
func cliBurstAndKill(t *testing.T, d *cliDaemon) []string {
	t.Helper()
	c := client.New(d.URL, &http.Client{Timeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var (
		mu      sync.Mutex
		acked   []string
		next    = 0
		killed  = make(chan struct{})
		killErr error
		once    sync.Once
		wg      sync.WaitGroup
	)
	kill := func() { once.Do(func() { killErr = d.Kill(); close(killed) }) }
	for w := 0; w < cliBurstWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= cliBurstMax {
					return
				}
				r := rules.Rule{
					ServiceArguments: rules.ServiceArguments{ExternalIP: cliBurstVIP, Port: cliBurstBasePort + i,
						Protocol: "tcp", Mode: 4, Name: "e2e-burst"},
					Endpoints: []rules.Endpoint{{EndpointIP: "127.0.0.21", TargetPort: 8000, Weight: 1}},
				}
				if _, err := c.Apply(ctx, r); err != nil {
					return // the daemon is gone (or refused): stop this writer
				}
				mu.Lock()
				acked = append(acked, fmt.Sprintf("%s:%d", cliBurstVIP, cliBurstBasePort+i))
				n := len(acked)
				mu.Unlock()
				if n == cliBurstKillAfter {
					go kill() // writers keep going while the process dies
				}
			}
		}()
	}
	wg.Wait()
	kill() // in case the burst finished before the threshold
	<-killed
	if killErr != nil {
		t.Fatal(killErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < cliBurstKillAfter {
		t.Fatalf("only %d writes acknowledged before the kill", len(acked))
	}
	return append([]string(nil), acked...)
}
