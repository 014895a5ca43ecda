package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/fakeengine"
)

// TestValidateAPIKeyStep runs `infergate validate` on a rule that enforces
// keys (without a key: WARN and the probes fail 401; with the key in the
// environment: PASS and the probes pass) and on one that does not (SKIP),
// and checks the key never appears in validate's output.
func TestValidateAPIKeyStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := cliBuild(t)
	d := cliStartDaemon(t, bin, t.TempDir())
	eng, err := fakeengine.Start(fakeengine.Options{Name: "e1", Addr: "127.0.0.84:0", Tokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	for _, r := range []struct{ name, ip, auth string }{{"keyed", "127.0.0.85", `,"api_key_auth":"required"`}, {"open", "127.0.0.86", ""}} {
		body := fmt.Sprintf(`{"serviceArguments":{"externalIP":"%s","port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"%s"%s},
		 "endpoints":[{"endpointIP":"127.0.0.84","targetPort":%d,"weight":1}]}`, r.ip, cliFreePort(t), r.name, r.auth, eng.Port())
		resp, err := http.Post(d.URL+"/netlox/v1/config/loadbalancer", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("create rule %s: %d", r.name, resp.StatusCode)
		}
	}
	out := cliMust(t, bin, d.URL, "create", "apikey", "--tenant=team-a", "--name=validate")
	raw := regexp.MustCompile(`raw_key: (lxb_\S+)`).FindStringSubmatch(out)
	if raw == nil {
		t.Fatalf("create apikey: %q", out)
	}
	cases := []struct {
		name, rule string
		env        []string
		step       string // the API-key step's status
		nonStream  string
		code       int
	}{
		{"keyed rule without a key", "keyed", nil, "WARN", "FAIL", 1},
		{"keyed rule with the key", "keyed", []string{"INFERGATE_VALIDATE_API_KEY=" + raw[1]}, "PASS", "PASS", 0},
		{"open rule", "open", nil, "SKIP", "PASS", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := cliRunEnv(t, bin, d.URL, c.env, "validate", c.rule, "-o", "json")
			var v validateJSON
			if err := json.Unmarshal([]byte(res.Stdout), &v); err != nil {
				t.Fatalf("-o json: %v\n%s\n%s", err, res.Stdout, res.Stderr)
			}
			if got, _ := v.step("API-key enforcement"); got != c.step {
				t.Errorf("API-key step = %q, want %s\n%s", got, c.step, res.Stdout)
			}
			if got, _ := v.step("non-streaming request"); got != c.nonStream {
				t.Errorf("non-streaming step = %q, want %s", got, c.nonStream)
			}
			if res.Code != c.code {
				t.Errorf("exit %d, want %d\n%s", res.Code, c.code, res.Stdout)
			}
			if strings.Contains(res.Stdout+res.Stderr, raw[1][len(raw[1])-20:]) {
				t.Error("validate printed the key's secret")
			}
		})
	}
}
