package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
)

// TestTenantKeysThroughTheBinary drives the key lifecycle as an operator and
// a client would: a keyed rule, a key made with the CLI, a burst over its
// token budget, a restart that keeps keys and limits, and GETs that never
// show key material.
func TestTenantKeysThroughTheBinary(t *testing.T) {
	bin := cliBuild(t)
	state := t.TempDir()
	d := cliStartDaemon(t, bin, state)
	eng, err := fakeengine.Start(fakeengine.Options{Name: "e1", Addr: "127.0.0.81:0", Tokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	vipPort := cliFreePort(t)
	rule := fmt.Sprintf(`{"serviceArguments":{"externalIP":"127.0.0.82","port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"keyed","api_key_auth":"required"},
	 "endpoints":[{"endpointIP":"127.0.0.81","targetPort":%d,"weight":1}]}`, vipPort, eng.Port())
	resp, err := http.Post(d.URL+"/netlox/v1/config/loadbalancer", "application/json", strings.NewReader(rule))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("create rule: %d", resp.StatusCode)
	}
	out := cliMust(t, bin, d.URL, "create", "apikey", "--tenant=team-a", "--name=ci", "--tpm=600")
	raw := regexp.MustCompile(`raw_key: (lxb_\S+)`).FindStringSubmatch(out)
	id := regexp.MustCompile(`key_id:\s+(\S+)`).FindStringSubmatch(out)
	if raw == nil || id == nil {
		t.Fatalf("create apikey output: %q", out)
	}
	vip := fmt.Sprintf("http://127.0.0.82:%d/v1/completions", vipPort)
	hc := &http.Client{Timeout: 10 * time.Second}
	send := func(key string) (int, http.Header) {
		req, _ := http.NewRequest(http.MethodPost, vip, strings.NewReader(`{"model":"fake-model","prompt":"hello","max_tokens":100}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		r, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return r.StatusCode, r.Header
	}
	if s, _ := send(""); s != http.StatusUnauthorized {
		t.Fatalf("no key: %d", s)
	}
	// Each request reserves 2+100 tokens and uses 1+10: the 600/min budget
	// admits many while settling, and refuses once spent.
	ok, limited := 0, 0
	for i := 0; i < 80 && limited == 0; i++ {
		s, h := send(raw[1])
		switch s {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if h.Get("Retry-After") == "" || h.Get("X-Ratelimit-Limit-Tokens") != "600" {
				t.Fatalf("429 headers: %v", h)
			}
		default:
			t.Fatalf("status %d", s)
		}
	}
	if limited == 0 {
		t.Fatalf("80 requests of 11 tokens each never hit a 600 tokens/min budget (%d ok)", ok)
	}
	var u struct {
		TotalTokens int `json:"total_tokens"`
		Requests    int `json:"requests"`
	}
	uj := cliMust(t, bin, d.URL, "get", "apikey", id[1], "--usage")
	if err := json.Unmarshal([]byte(uj), &u); err != nil {
		t.Fatalf("usage %q: %v", uj, err)
	}
	// Within the budget plus one request's reservation (and the refill
	// during the test, a few tokens a second).
	if u.TotalTokens > 600+102+60 || u.Requests != ok {
		t.Fatalf("usage %+v after %d admitted: over the budget", u, ok)
	}
	for _, get := range []string{"/netlox/v1/config/ai/apikey", "/netlox/v1/config/ai/apikey/" + id[1]} {
		r, err := http.Get(d.URL + get)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(string(b), raw[1][len("lxb_")+17:]) || strings.Contains(string(b), "sha256$") {
			t.Fatalf("GET %s shows key material: %s", get, b)
		}
	}

	d.Stop(t)
	d2 := cliStartDaemon(t, bin, state)
	out = cliMust(t, bin, d2.URL, "get", "apikey", "-o", "json")
	if !strings.Contains(out, id[1]) || !strings.Contains(out, `"tokens_per_min": 600`) {
		t.Fatalf("after restart: %s", out)
	}
	eventually(t, 10*time.Second, "keyed rule serving after restart", func() bool {
		s, _ := send(raw[1])
		return s == http.StatusOK || s == http.StatusTooManyRequests
	})
	if s, _ := send("lxb_0123456789abcdef_wrong"); s != http.StatusUnauthorized {
		t.Fatalf("wrong key after restart: %d", s)
	}
}
