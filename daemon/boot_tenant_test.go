package daemon

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/tenant"
)

// TestRuleFilesWithKeys: --rules may hold kind: ApiKey and kind: TenantLimit
// documents; they are applied to the key store at boot (created, then
// unchanged on restart), and one holding a raw key is logged and skipped.
func TestRuleFilesWithKeys(t *testing.T) {
	m, err := tenant.Mint()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	file := "apiVersion: infergate.io/v1\nkind: ApiKey\nspec:\n  tenant_id: team-a\n  name: ci\n  key_id: " + m.ID +
		"\n  key_hash: " + m.Hash.String() + "\n  tokens_per_min: 1000\n---\n" +
		"apiVersion: infergate/v1\nkind: TenantLimit\nspec: {tenant_id: team-a, rps: 9}\n---\n" +
		"apiVersion: infergate/v1\nkind: ApiKey\nspec: {tenant_id: team-a, name: leak, raw_key: " + m.Raw.Reveal() + "}\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	log, logs := testLogger()
	opts := DefaultOptions()
	opts.StateDir = filepath.Join(dir, "state")
	opts.RulesPath = path
	for run := 1; run <= 2; run++ {
		d := start(t, opts, log)
		resp, err := http.Get(d.base + "/netlox/v1/config/ai/apikey/" + m.ID)
		if err != nil {
			t.Fatal(err)
		}
		var k tenant.KeyView
		err = json.NewDecoder(resp.Body).Decode(&k)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || k.TenantID != "team-a" || k.TokensPerMin != 1000 {
			t.Fatalf("run %d: GET key = %d %+v %v", run, resp.StatusCode, k, err)
		}
		if err := d.stop(); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "file document created"); n != 2 { // the key and the limit, first run only
		t.Errorf("logged %d creations over two runs, want 2:\n%s", n, out)
	}
	if n := strings.Count(out, "file document rejected"); n != 2 || !strings.Contains(out, path+"#3") {
		t.Errorf("the raw-key document: %d rejections, want 2 (one a run), with its source:\n%s", n, out)
	}
	if strings.Contains(out, m.Raw.Reveal()[len(m.Raw.Reveal())-20:]) {
		t.Error("the raw key reached the log")
	}
}
