package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
)

// Bounds and names of the prefix-affinity end-to-end test.
const (
	affWait       = 15 * time.Second
	affRule       = "affinity-e2e"
	affRuleOff    = "affinity-off-e2e"
	affSticky     = 6 // requests that must all follow the first one
	affHeld       = 4 // hung requests: load 4 > least loaded 0 + pd_balance_abs_threshold 3
	affBalanceAbs = 3
	affIPBase     = 110 // 127.0.0.110.. (other e2e tests use lower addresses)
)

// affSystemPrompt is an ~8 KiB system prompt shared by every request.
func affSystemPrompt() string {
	var b strings.Builder
	for i := 0; b.Len() < 8<<10; i++ {
		fmt.Fprintf(&b, "Rule %d: answer precisely, cite the policy section and never guess. ", i)
	}
	return b.String()
}

func affChatBody(system, user string) string {
	b, _ := json.Marshal(map[string]any{
		"model": "fake-model", "max_tokens": 4,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}},
	})
	return string(b)
}

func affFake(t *testing.T, ip string, role pdfake.Role) *pdfake.Engine {
	t.Helper()
	cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
	cfg.Addr = ip + ":0"
	e, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatalf("start fake %s: %v", ip, err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// affRuleJSON is a 2P2D vLLM rule over the fakes.
func affRuleJSON(name, vip string, port int, cacheAware bool, prefills, decodes []*pdfake.Engine) string {
	var eps []string
	for role, es := range map[int][]*pdfake.Engine{1: prefills, 2: decodes} {
		for _, e := range es {
			a := e.AddrPort()
			eps = append(eps, fmt.Sprintf(`{"endpointIP":%q,"targetPort":%d,"weight":1,"ep_role":%d}`, a.Addr(), a.Port(), role))
		}
	}
	return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4,"name":%q,`+
		`"pd_disagg_mode":true,"pd_cache_aware_mode":%v,"pd_cache_threshold":20,"pd_balance_abs_threshold":%d,`+
		`"kvEngineType":"vllm","probetype":"http","probereq":"/health"},"endpoints":[%s]}`,
		vip, port, name, cacheAware, affBalanceAbs, strings.Join(eps, ","))
}

func affPost(ctx context.Context, url, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// affSend sends one chat request through the VIP and fails t unless 200.
func affSend(t *testing.T, vip, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), affWait)
	defer cancel()
	st, b, err := affPost(ctx, "http://"+vip+"/v1/chat/completions", body)
	if err != nil || st != http.StatusOK {
		t.Fatalf("VIP request: status %d err %v: %.300s", st, err, b)
	}
}

func affEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually(t, affWait, what, cond)
}

// affMetric sums the samples of family name whose line has every label.
func affMetric(t *testing.T, base, name string, labels ...string) float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
next:
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// affExplanation is the part of the datapath's explanation this test reads.
type affExplanation struct {
	Outcome string `json:"outcome"`
	Prefill string `json:"prefill"`
	Steps   []struct {
		Tier   string `json:"tier"`
		Hit    bool   `json:"hit"`
		Reason string `json:"reason"`
		Choice string `json:"choice"`
	} `json:"steps"`
	Prefix *struct {
		Hit      bool    `json:"hit"`
		Reason   string  `json:"reason"`
		Endpoint string  `json:"endpoint"`
		Rate     float64 `json:"match_rate"`
	} `json:"prefix"`
}

func (e affExplanation) step(tier string) (hit bool, reason, choice string, ok bool) {
	for _, s := range e.Steps {
		if s.Tier == tier {
			return s.Hit, s.Reason, s.Choice, true
		}
	}
	return false, "", "", false
}

// affCounts returns how many inference requests each engine has received.
func affCounts(es ...*pdfake.Engine) []int {
	out := make([]int, len(es))
	for i, e := range es {
		out[i] = len(e.Records())
	}
	return out
}

// TestPrefixAffinityDaemon drives the real daemon with a 2P2D vLLM rule in
// pd_cache_aware_mode over recording fakes: requests sharing an 8 KiB system
// prompt stick to one prefill while its load allows; with that prefill held
// busy by hung requests (load above the least loaded + 3) they go elsewhere
// (Tier 1 falls through with load_guard); the explain API and CLI show Tier
// 1 with its match rate; trie and ladder metrics move. The same traffic on a
// rule with cache-aware mode off spreads by load. A prefill that goes down
// loses its prefixes.
func TestPrefixAffinityDaemon(t *testing.T) {
	bin := cliBuild(t)
	// This test holds the in-flight guard (pd_balance_abs_threshold) to its
	// contract, so it runs the daemon with that guard; by default the cost
	// model guards Tier 1 instead, and 4 hung requests on a holder of an
	// 8 KB prefix would not outweigh the prefill it saves
	// (datapath/ladder/tier_cost_test.go).
	d := cliStartDaemon(t, bin, t.TempDir(), "--kv-legacy-load-guard")
	ip := func(i int) string { return fmt.Sprintf("127.0.0.%d", affIPBase+i) }
	p0, p1 := affFake(t, ip(1), pdfake.Prefill), affFake(t, ip(2), pdfake.Prefill)
	d0, d1 := affFake(t, ip(3), pdfake.Decode), affFake(t, ip(4), pdfake.Decode)
	prefills, decodes := []*pdfake.Engine{p0, p1}, []*pdfake.Engine{d0, d1}
	vipPort := cliFreePort(t)
	vip := fmt.Sprintf("%s:%d", ip(0), vipPort)
	postRule := func(body string) {
		ctx, cancel := context.WithTimeout(context.Background(), affWait)
		defer cancel()
		st, b, err := affPost(ctx, d.URL+"/netlox/v1/config/loadbalancer", body)
		if err != nil || st != http.StatusOK {
			t.Fatalf("POST rule: %d %v %s", st, err, b)
		}
	}
	postRule(affRuleJSON(affRule, ip(0), vipPort, true, prefills, decodes))

	sys := affSystemPrompt()
	affEventually(t, "the VIP serves", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, _, err := affPost(ctx, "http://"+vip+"/v1/chat/completions", affChatBody(sys, "warm-up"))
		return err == nil && st == http.StatusOK
	})

	// 1. Stickiness: every request sharing the system prompt follows the
	// first one (the warm-up) to the same prefill.
	before := affCounts(p0, p1)
	hitsBefore := affMetric(t, d.URL, "infergate_ladder_decisions_total", `rule="`+affRule+`"`, `tier="tier1_prefix"`, `outcome="hit"`)
	for i := range affSticky {
		affSend(t, vip, affChatBody(sys, fmt.Sprintf("question %d", i)))
	}
	after := affCounts(p0, p1)
	sticky, other := p0, p1
	if after[1]-before[1] > after[0]-before[0] {
		sticky, other = p1, p0
	}
	if got := max(after[0]-before[0], after[1]-before[1]); got != affSticky {
		t.Fatalf("prefill requests %v → %v: want all %d on one prefill", before, after, affSticky)
	}
	if got := affMetric(t, d.URL, "infergate_ladder_decisions_total", `rule="`+affRule+`"`, `tier="tier1_prefix"`, `outcome="hit"`) - hitsBefore; got < affSticky {
		t.Fatalf("tier1_prefix hits moved by %v, want ≥ %d", got, affSticky)
	}
	if n := affMetric(t, d.URL, "loxilb_pd_trie_nodes", `rule="`+affRule+`"`); n <= 0 {
		t.Fatalf("loxilb_pd_trie_nodes = %v, want > 0", n)
	}
	if n := affMetric(t, d.URL, "loxilb_pd_trie_match_rate_count", `rule="`+affRule+`"`); n < affSticky {
		t.Fatalf("loxilb_pd_trie_match_rate observed %v times, want ≥ %d", n, affSticky)
	}

	// 2. The explain API shows Tier 1 choosing the sticky prefill, with a
	// match rate (the system prompt is almost the whole key), and changes
	// nothing.
	explainURL := fmt.Sprintf("%s/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp/explain", d.URL, ip(0), vipPort)
	explain := func() affExplanation {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), affWait)
		defer cancel()
		env := fmt.Sprintf(`{"path":"/v1/chat/completions","body":%s}`, affChatBody(sys, "explain me"))
		st, b, err := affPost(ctx, explainURL, env)
		if err != nil || st != http.StatusOK {
			t.Fatalf("explain: %d %v %s", st, err, b)
		}
		var e affExplanation
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("explain answer %s: %v", b, err)
		}
		return e
	}
	beforeExplain := affCounts(p0, p1)
	e := explain()
	if hit, reason, choice, ok := e.step("tier1_prefix"); !ok || !hit || choice != sticky.AddrPort().String() {
		t.Fatalf("explain tier1_prefix: hit=%v reason=%q choice=%q present=%v; want hit on %s (%+v)", hit, reason, choice, ok, sticky.AddrPort(), e)
	}
	if e.Prefix == nil || !e.Prefix.Hit || e.Prefix.Rate < 0.8 || e.Prefix.Endpoint != sticky.AddrPort().String() {
		t.Fatalf("explain prefix view %+v, want a hit on %s with match rate ≥ 0.8", e.Prefix, sticky.AddrPort())
	}
	if c := affCounts(p0, p1); c[0] != beforeExplain[0] || c[1] != beforeExplain[1] {
		t.Fatalf("explain sent requests to engines: %v → %v", beforeExplain, c)
	}
	// The CLI prints the same explanation as a table.
	bodyFile := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(bodyFile, []byte(affChatBody(sys, "explain me")), 0o600); err != nil {
		t.Fatal(err)
	}
	res := cliRun(t, bin, d.URL, "explain", ip(0), "--tcp="+strconv.Itoa(vipPort), "-f", bodyFile)
	if res.Code != 0 || !strings.Contains(res.Stdout, "tier1_prefix") || !strings.Contains(res.Stdout, "match_rate:") {
		t.Fatalf("infergate explain: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, res.Stderr)
	}

	// 3. Hold the sticky prefill busy: hung requests raise its load to
	// affHeld while the other prefill is idle, so Tier 1 yields (load_guard)
	// and new prefix-sharing requests go to the other prefill.
	guardBefore := affMetric(t, d.URL, "infergate_ladder_decisions_total", `rule="`+affRule+`"`, `tier="tier1_prefix"`, `reason="load_guard"`)
	sticky.Inject(pdfake.FaultHang, affHeld)
	holdCtx, release := context.WithCancel(context.Background())
	var held sync.WaitGroup
	defer func() { release(); held.Wait() }()
	base := len(sticky.Records())
	for i := range affHeld {
		held.Add(1)
		go func() {
			defer held.Done()
			_, _, _ = affPost(holdCtx, "http://"+vip+"/v1/chat/completions", affChatBody(sys, fmt.Sprintf("held %d", i)))
		}()
		// One at a time, so each is routed with the previous ones' load.
		wctx, cancel := context.WithTimeout(context.Background(), affWait)
		err := sticky.WaitReceived(wctx, base+i+1)
		cancel()
		if err != nil {
			t.Fatalf("held request %d did not reach the sticky prefill: %v", i, err)
		}
	}
	ex := explain()
	if hit, reason, _, _ := ex.step("tier1_prefix"); hit || reason != "load_guard" {
		t.Fatalf("explain under load: tier1_prefix hit=%v reason=%q, want load_guard (%+v)", hit, reason, ex)
	}
	overBefore := affCounts(sticky, other)
	const spread = 3
	for i := range spread {
		affSend(t, vip, affChatBody(sys, fmt.Sprintf("while busy %d", i)))
	}
	overAfter := affCounts(sticky, other)
	if overAfter[0] != overBefore[0] || overAfter[1]-overBefore[1] != spread {
		t.Fatalf("under load: sticky %d→%d, other %d→%d; want all %d on the other prefill",
			overBefore[0], overAfter[0], overBefore[1], overAfter[1], spread)
	}
	if got := affMetric(t, d.URL, "infergate_ladder_decisions_total", `rule="`+affRule+`"`, `tier="tier1_prefix"`, `reason="load_guard"`) - guardBefore; got < 1 {
		t.Fatalf("tier1_prefix load_guard misses moved by %v, want ≥ 1", got)
	}
	release()
	held.Wait()

	// 4. Cache-aware mode off: the same traffic spreads by load (sequential
	// requests see equal loads and rotate).
	offPort := cliFreePort(t)
	offVIP := fmt.Sprintf("%s:%d", ip(5), offPort)
	q0, q1 := affFake(t, ip(6), pdfake.Prefill), affFake(t, ip(7), pdfake.Prefill)
	e0 := affFake(t, ip(8), pdfake.Decode)
	postRule(affRuleJSON(affRuleOff, ip(5), offPort, false, []*pdfake.Engine{q0, q1}, []*pdfake.Engine{e0}))
	affEventually(t, "the cache-unaware VIP serves", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, _, err := affPost(ctx, "http://"+offVIP+"/v1/chat/completions", affChatBody(sys, "warm-up"))
		return err == nil && st == http.StatusOK
	})
	offBefore := affCounts(q0, q1)
	for i := range affSticky {
		affSend(t, offVIP, affChatBody(sys, fmt.Sprintf("question %d", i)))
	}
	offAfter := affCounts(q0, q1)
	if offAfter[0]-offBefore[0] < 2 || offAfter[1]-offBefore[1] < 2 {
		t.Fatalf("cache-aware off: prefills %v → %v, want both to take ≥ 2 of %d", offBefore, offAfter, affSticky)
	}
	if n := affMetric(t, d.URL, "infergate_ladder_decisions_total", `rule="`+affRuleOff+`"`, `tier="tier1_prefix"`); n != 0 {
		t.Fatalf("cache-aware off rule ran Tier 1 (%v decisions)", n)
	}

	// 5. The sticky prefill goes down: once probes (or its breaker) take it
	// out, the index forgets the prefixes only it owned, so the trie
	// shrinks instead of waiting for LRU.
	nodesBefore := affMetric(t, d.URL, "loxilb_pd_trie_nodes", `rule="`+affRule+`"`)
	if err := sticky.Close(); err != nil {
		t.Fatal(err)
	}
	affEventually(t, "the down prefill's prefixes to be forgotten", func() bool {
		return affMetric(t, d.URL, "loxilb_pd_trie_nodes", `rule="`+affRule+`"`) < nodesBefore
	})
	affSend(t, vip, affChatBody(sys, "after the sticky prefill went down"))
}
