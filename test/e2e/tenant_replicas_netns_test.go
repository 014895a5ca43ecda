package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/tenant"
)

// TestTenantLimitAcrossReplicasNetns measures the overshoot of a key's
// request limit at 3 replicas sharing an etcd store (each in its own
// network namespace, one VIP): a kind: ApiKey file applied through one
// replica reaches all (keys live in etcd), each enforces 1/3 of the limit, and a 10×
// overload spread evenly over the replicas is admitted at about one limit.
// The figure is logged; the assertion only checks the share is in force
// (without it, three replicas admit about 3× the limit).
func TestTenantLimitAcrossReplicasNetns(t *testing.T) {
	nss := rnTopology(t)
	bin := cliBuild(t)
	etcd := etcdtest.StartOn(t, 1, rnEtcdIP)
	store := etcd.URL("/tenants")
	eng, err := fakeengine.Start(fakeengine.Options{Name: "e", Addr: rnHostIP(1) + ":0", Tokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	tokenFile := rnTokenFile(t)
	reps := make([]*rnReplica, rnReplicas)
	for i := range reps {
		reps[i] = rnStart(t, bin, nss[i], i+1, store, tokenFile)
	}
	api := &http.Client{Timeout: 5 * time.Second, Transport: rnBearer{http.DefaultTransport}}
	for _, r := range reps {
		eventually(t, 30*time.Second, "replica "+r.ns+" ready", func() bool {
			st, _ := rnGet(api, r.api+"/readyz")
			return st == 200
		})
	}
	const port, rps = 8090, 15
	rule := fmt.Sprintf(`{"serviceArguments":{"externalIP":"%s","port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"keyed","api_key_auth":"required"},
	 "endpoints":[{"endpointIP":"%s","targetPort":%d,"weight":1}]}`, rnVIP, port, rnHostIP(1), eng.Port())
	if st, _, b := rnPost(api, reps[0].api+"/netlox/v1/config/loadbalancer", rule); st != 200 {
		t.Fatalf("create rule: %d %s", st, b)
	}
	m, err := tenant.Mint()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "keys.yaml")
	doc := fmt.Sprintf("apiVersion: infergate/v1\nkind: ApiKey\nspec:\n  tenant_id: team-a\n  name: shared\n  key_id: %s\n  key_hash: %s\n  rate_limit_rps: %d\n", m.ID, m.Hash.String(), rps)
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	// Keys live in the shared store: applied through one replica, known to all.
	if res := cliRun(t, bin, reps[0].api, "--token", rnToken, "apply", "-f", file); res.Code != 0 || !strings.Contains(res.Stdout, "created") {
		t.Fatalf("apply -f on %s: %d %s %s", reps[0].ns, res.Code, res.Stdout, res.Stderr)
	}
	for _, r := range reps[1:] {
		eventually(t, 10*time.Second, "the key on "+r.ns, func() bool {
			st, _ := rnGet(api, r.api+"/netlox/v1/config/ai/apikey/"+m.ID)
			return st == 200
		})
		if res := cliRun(t, bin, r.api, "--token", rnToken, "apply", "-f", file); res.Code != 0 || !strings.Contains(res.Stdout, "unchanged") {
			t.Fatalf("re-apply on %s: %d %s %s", r.ns, res.Code, res.Stdout, res.Stderr)
		}
	}
	url := fmt.Sprintf("http://%s:%d/v1/completions", rnVIP, port)
	send := func(r *rnReplica) (int, http.Header) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"fake-model","prompt":"hi","max_tokens":2}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+m.Raw.Reveal())
		resp, err := r.client.Do(req)
		if err != nil {
			return 0, nil
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	share := fmt.Sprint(rps / rnReplicas)
	for _, r := range reps {
		last, deadline := "", time.Now().Add(20*time.Second)
		for {
			st, h := send(r)
			if st == 200 && h.Get("X-Ratelimit-Limit-Requests") == share {
				break
			}
			last = fmt.Sprintf("HTTP %d, x-ratelimit-limit-requests %q", st, h.Get("X-Ratelimit-Limit-Requests"))
			if time.Now().After(deadline) {
				t.Fatalf("replica %s never enforced a third of the limit; last answer %s", r.ns, last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(1500 * time.Millisecond) // let every bucket refill to its burst

	// 10× the limit for about 2 s, round robin over the replicas.
	const offered = 10 * rps * 2
	interval := time.Second / (10 * rps)
	admitted, limited := make([]int, rnReplicas), 0
	start := time.Now()
	for i := range offered {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		switch st, h := send(reps[i%rnReplicas]); st {
		case http.StatusOK:
			admitted[i%rnReplicas]++
		case http.StatusTooManyRequests:
			limited++
			if h.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After: %v", h)
			}
		default:
			t.Fatalf("request %d: status %d", i, st)
		}
	}
	elapsed := time.Since(start).Seconds()
	total := admitted[0] + admitted[1] + admitted[2]
	ideal := float64(rps) + float64(rps)*elapsed // one bucket: full burst plus refill
	t.Logf("3 replicas, key limit %d rps (burst %d), %d requests offered over %.2fs (%.0f/s, 10x): admitted %d (per replica %v), 429 %d; one shared limit would admit %.1f: overshoot %.2fx (without per-replica shares each replica would admit a whole limit: ~3x, by construction)",
		rps, rps, offered, elapsed, float64(offered)/elapsed, total, admitted, limited, ideal, float64(total)/ideal)
	if float64(total) > 2*ideal {
		t.Fatalf("admitted %d, over twice one limit (%.1f): the per-replica share is not in force", total, ideal)
	}
	if limited == 0 {
		t.Fatal("a 10x overload was never limited")
	}
}
