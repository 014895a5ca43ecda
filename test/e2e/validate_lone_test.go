package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/pdfake"
)

// TestValidateFailsLoneEndpoints: on a vLLM P/D rule with one prefill, one
// decode and a role-0 endpoint, `validate --disruptive` fails the lone
// prefill (its decode recomputes until the breaker opens, then the role-0
// endpoint serves) and the lone decode (the role-0 fallback), every request
// served, instead of skipping them as alone in their role; the rule is
// restored exactly.
func TestValidateFailsLoneEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := cliBuild(t)
	d := cliStartDaemon(t, bin, t.TempDir())
	var eps, ids []string
	for _, e := range []struct {
		ip   string
		role pdfake.Role
		ep   int
	}{{"127.0.0.61", pdfake.Prefill, 1}, {"127.0.0.62", pdfake.Decode, 2}, {"127.0.0.63", pdfake.Decode, 0}} {
		cfg := pdfake.DefaultConfig(pdfake.VLLM, e.role)
		cfg.Addr = e.ip + ":0"
		f, err := pdfake.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		a := f.AddrPort()
		eps = append(eps, fmt.Sprintf("    - {endpointIP: %s, targetPort: %d, weight: 1, ep_role: %d}", a.Addr(), a.Port(), e.ep))
		ids = append(ids, a.String())
	}
	rule := fmt.Sprintf(`apiVersion: infergate/v1
kind: Loadbalancer
metadata:
  name: lone
spec:
  serviceArguments: {externalIP: 127.0.0.1, port: %d, protocol: tcp, sel: 0, mode: 4, pd_disagg_mode: true, kvEngineType: vllm, cb_enable: true}
  endpoints:
%s
`, cliFreePort(t), strings.Join(eps, "\n"))
	file := filepath.Join(t.TempDir(), "lone.yaml")
	if err := os.WriteFile(file, []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	cliMust(t, bin, d.URL, "apply", "-f", file)
	before := configOnly(t, cliMust(t, bin, d.URL, "get", "lb", "-o", "json"))

	res := cliRun(t, bin, d.URL, "validate", "lone", "--disruptive", "-o", "json")
	var v struct {
		Steps []struct {
			Name     string   `json:"name"`
			Status   string   `json:"status"`
			Evidence []string `json:"evidence"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
		t.Fatalf("-o json: %v\n%s\n%s", err, res.Stdout, res.Stderr)
	}
	found := false
	for _, s := range v.Steps {
		if s.Name != "fail and recover" {
			continue
		}
		found = true
		ev := strings.Join(s.Evidence, "\n")
		if s.Status != "PASS" {
			t.Errorf("fail and recover = %s, want PASS\n%s", s.Status, ev)
		}
		for _, id := range ids[:2] { // the lone prefill and the lone decode
			if !strings.Contains(ev, id+" failed: replaced by") {
				t.Errorf("%s was not failed:\n%s", id, ev)
			}
		}
		if !strings.Contains(ev, ids[2]+": only any endpoint, not failed") {
			t.Errorf("the role-0 endpoint %s should be left alone:\n%s", ids[2], ev)
		}
	}
	if !found {
		t.Fatalf("no fail and recover step:\n%s", res.Stdout)
	}
	if after := configOnly(t, cliMust(t, bin, d.URL, "get", "lb", "-o", "json")); after != before {
		t.Errorf("rule not restored exactly:\nbefore %s\nafter  %s", before, after)
	}
}
