package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/tenant"
)

func newKeysHarness(t *testing.T) (*harness, string) {
	t.Helper()
	dir := t.TempDir()
	rs, err := store.Open(store.Options{StateDir: dir, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	keys, err := tenant.Open(tenant.Options{StateDir: dir, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	opts := api.DefaultOptions()
	opts.Store, opts.Keys = rs, keys
	return serveOptions(t, opts), dir
}

func TestAPIKeyLifecycleOverREST(t *testing.T) {
	h, _ := newKeysHarness(t)
	const base = api.BasePath + "/config/ai/apikey"
	r := h.do(t, http.MethodPost, base, []byte(`{"tenant_id":"team-a","name":"ci","allowed_models":["llama"],"rate_limit_rps":5,"tokens_per_min":1000}`))
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var c tenant.Created
	if err := json.Unmarshal(r.body, &c); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.RawKey, "lxb_") || c.KeyID == "" || c.BurstSize != 5 || !c.Enabled {
		t.Fatalf("created %+v", c)
	}
	if r.header.Get("Cache-Control") != "no-store" {
		t.Fatal("the create answer (holding the raw key) is cacheable")
	}
	secret := c.RawKey[len("lxb_")+17:]
	for _, path := range []string{base, base + "?tenant_id=team-a", base + "/" + c.KeyID} {
		g := h.do(t, http.MethodGet, path, nil)
		if g.status != http.StatusOK || !strings.Contains(string(g.body), c.KeyID) {
			t.Fatalf("GET %s: %d %s", path, g.status, g.body)
		}
		if strings.Contains(string(g.body), secret) || strings.Contains(string(g.body), "sha256$") || strings.Contains(string(g.body), "raw_key") {
			t.Fatalf("GET %s shows key material: %s", path, g.body)
		}
	}
	if g := h.do(t, http.MethodGet, base+"?tenant_id=other", nil); strings.Contains(string(g.body), c.KeyID) {
		t.Fatalf("tenant filter: %s", g.body)
	}
	p := h.do(t, http.MethodPatch, base+"/"+c.KeyID, []byte(`{"enabled":false,"allowed_models":["llama","qwen"]}`))
	if p.status != http.StatusOK || !strings.Contains(string(p.body), `"enabled":false`) || !strings.Contains(string(p.body), "qwen") {
		t.Fatalf("patch: %d %s", p.status, p.body)
	}
	if u := h.do(t, http.MethodGet, base+"/"+c.KeyID+"/usage", nil); u.status != http.StatusOK || !strings.Contains(string(u.body), `"requests":0`) {
		t.Fatalf("usage: %d %s", u.status, u.body)
	}
	if d := h.do(t, http.MethodDelete, base+"/"+c.KeyID, nil); d.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
	if g := h.do(t, http.MethodGet, base+"/"+c.KeyID, nil); g.status != http.StatusNotFound || !strings.Contains(string(g.body), "apikey_not_found") {
		t.Fatalf("GET after delete: %d %s", g.status, g.body)
	}
}

func TestAPIKeyBadInput(t *testing.T) {
	h, _ := newKeysHarness(t)
	const base = api.BasePath + "/config/ai/apikey"
	cases := []struct {
		name, body, code, field string
	}{
		{"unknown field", `{"tenant_id":"t","name":"n","rate_limit":5}`, "unknown_field", "rate_limit"},
		{"wrong type", `{"tenant_id":"t","name":"n","rate_limit_rps":"5"}`, "malformed_json", "rate_limit_rps"},
		{"zero limit", `{"tenant_id":"t","name":"n","tokens_per_min":0}`, "invalid_field", "tokens_per_min"},
		{"burst below rps", `{"tenant_id":"t","name":"n","rate_limit_rps":10,"burst_size":2}`, "invalid_combination", "burst_size"},
		{"control character", `{"tenant_id":"t\u0007","name":"n"}`, "invalid_field", "tenant_id"},
		{"not JSON", `{"tenant_id":`, "malformed_json", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(t, http.MethodPost, base, []byte(tc.body))
			var e api.ErrorBody
			_ = json.Unmarshal(r.body, &e)
			if r.status != http.StatusBadRequest || e.ErrorCode != tc.code || e.Field != tc.field {
				t.Fatalf("got %d %s", r.status, r.body)
			}
		})
	}
	if g := h.do(t, http.MethodGet, base, nil); string(g.body) != `{"keys":[]}` {
		t.Fatalf("rejected creates left keys behind: %s", g.body)
	}
	tl := h.do(t, http.MethodPost, api.BasePath+"/config/ai/tenant/ratelimit", []byte(`{"tenant_id":"t","rps":0}`))
	if tl.status != http.StatusBadRequest {
		t.Fatalf("tenant rps 0: %d %s", tl.status, tl.body)
	}
	tl = h.do(t, http.MethodPost, api.BasePath+"/config/ai/tenant/ratelimit", []byte(`{"tenant_id":"t","rps":20,"tokens_per_min":5000}`))
	if tl.status != http.StatusOK {
		t.Fatalf("tenant limit: %d %s", tl.status, tl.body)
	}
	if g := h.do(t, http.MethodGet, api.BasePath+"/config/ai/tenant/ratelimit", nil); !strings.Contains(string(g.body), `"rps":20`) {
		t.Fatalf("tenant limits: %s", g.body)
	}
}

// TestGetTenantLimit: LoxiLB's GET …/tenant/ratelimit/{tenant_id} answers
// the tenant's ceilings, 404 tenant_not_found without any.
func TestGetTenantLimit(t *testing.T) {
	h, _ := newKeysHarness(t)
	path := api.BasePath + "/config/ai/tenant/ratelimit"
	if r := h.do(t, http.MethodPost, path, []byte(`{"tenant_id":"acme","rps":20,"tokens_per_min":5000}`)); r.status != http.StatusOK {
		t.Fatalf("set: %d %s", r.status, r.body)
	}
	r := h.do(t, http.MethodGet, path+"/acme", nil)
	var got struct {
		TenantID     string `json:"tenant_id"`
		RPS          int    `json:"rps"`
		TokensPerMin int    `json:"tokens_per_min"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.TenantID != "acme" || got.RPS != 20 || got.TokensPerMin != 5000 {
		t.Fatalf("GET acme: %d %s", r.status, r.body)
	}
	r = h.do(t, http.MethodGet, path+"/nobody", nil)
	var e api.ErrorBody
	if r.status != http.StatusNotFound || json.Unmarshal(r.body, &e) != nil || e.ErrorCode != "tenant_not_found" {
		t.Fatalf("GET nobody: %d %s", r.status, r.body)
	}
}
