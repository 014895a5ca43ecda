package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/kvexact/bpe"
)

// kvDaemon starts the real `infergate serve` with extra flags on a free
// port and a fresh state dir, and waits for /readyz.
func kvDaemon(t *testing.T, bin string, extra ...string) *cliDaemon {
	t.Helper()
	return cliStartDaemon(t, bin, t.TempDir(), extra...)
}

// kvRuleJSON is a vLLM P/D rule with kvExactMode 1 over the fakes.
func kvRuleJSON(vip string, port int, zmqPort uint16, prefills []*pdfake.Engine, decode *pdfake.Engine) string {
	var eps []string
	for _, e := range prefills {
		a := e.AddrPort()
		eps = append(eps, fmt.Sprintf(`{"endpointIP":%q,"targetPort":%d,"weight":1,"ep_role":1}`, a.Addr(), a.Port()))
	}
	a := decode.AddrPort()
	eps = append(eps, fmt.Sprintf(`{"endpointIP":%q,"targetPort":%d,"weight":1,"ep_role":2}`, a.Addr(), a.Port()))
	return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"kv-e2e",`+
		`"pd_disagg_mode":true,"pd_balance_abs_threshold":3,"kvExactMode":1,"kvEngineType":"vllm","kvZmqPort":%d,`+
		`"kvBlockSize":%d,"kvWarmupSec":1,"probetype":"http","probereq":"/health"},"endpoints":[%s]}`,
		vip, port, zmqPort, kvBlock, strings.Join(eps, ","))
}

func kvGetJSON(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
}

// kvMetric sums a family's samples whose line contains every label given.
func kvMetric(t *testing.T, base, name string, labels ...string) float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// kvVIPPost sends a text-prompt completion through the gateway's VIP.
func kvVIPPost(vip string, prompt string) error {
	return kvVIPPostPrompt(vip, strconv.Quote(prompt))
}

// kvVIPPostPrompt sends a completion whose "prompt" is the JSON value
// promptJSON (a string or a token-id array) through the gateway's VIP and
// wants a 200.
func kvVIPPostPrompt(vip, promptJSON string) error {
	body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":4}`, kvModel, promptJSON)
	ctx, cancel := context.WithTimeout(context.Background(), kvWait)
	defer cancel()
	st, b, err := affPost(ctx, "http://"+vip+"/v1/completions", body)
	if err != nil {
		return err
	}
	if st != http.StatusOK {
		return fmt.Errorf("status %d: %s", st, b)
	}
	return nil
}

type kvInventoryResp struct {
	Rows []kvplane.InventoryRow `json:"rows"`
}

func kvRow(rows []kvplane.InventoryRow, endpoint string) (kvplane.InventoryRow, bool) {
	for _, r := range rows {
		if r.Endpoint == endpoint {
			return r, true
		}
	}
	return kvplane.InventoryRow{}, false
}

// TestKVExactDaemon drives the real daemon: a vLLM P/D rule with
// kvExactMode 1 over two KV-publishing prefill fakes. A prompt lands on
// some prefill, whose events make Tier 1.5 send every prompt sharing that
// prefix there; loxilb_pd_kv_tier15_hits_total moves; the inventory API
// shows blocks and trust; an engine restart clears the endpoint and makes
// it untrusted during warm-up. Both topologies: the gateway dials the
// engines, or binds one socket they dial.
func TestKVExactDaemon(t *testing.T) {
	bin := cliBuild(t) // one build for every subtest
	for i, bind := range []bool{false, true} {
		t.Run(fmt.Sprintf("vllm-pd/bind=%v", bind), func(t *testing.T) {
			zmqPort := kvFreePort(t)
			var extra []string
			kv := pdfake.KVConfig{ZMQPort: int(zmqPort), BlockSize: kvBlock}
			if bind {
				addr := fmt.Sprintf("tcp://127.0.0.1:%d", zmqPort)
				extra = append(extra, "--kv-bind-addr", addr)
				kv = pdfake.KVConfig{ConnectAddr: addr, BlockSize: kvBlock, MapEncoding: true}
			}
			extra = append(extra, "--kv-tokenize-timeout", "2s") // a loaded 2-core CI box
			d := kvDaemon(t, bin, extra...)
			inventory := func() []kvplane.InventoryRow {
				var inv kvInventoryResp
				kvGetJSON(t, d.URL+"/netlox/v1/config/ai/kv/inventory", &inv)
				return inv.Rows
			}
			ipBase := 210 + 10*i
			a := kvFake(t, fmt.Sprintf("127.0.0.%d", ipBase+2), pdfake.Prefill, kv)
			b := kvFake(t, fmt.Sprintf("127.0.0.%d", ipBase+3), pdfake.Prefill, kv)
			dec := kvFake(t, fmt.Sprintf("127.0.0.%d", ipBase+4), pdfake.Decode, pdfake.KVConfig{})
			vipPort := cliFreePort(t)
			vip := fmt.Sprintf("127.0.0.%d:%d", ipBase+1, vipPort)
			kvPostOK(t, d.URL+"/netlox/v1/config/loadbalancer", kvRuleJSON(fmt.Sprintf("127.0.0.%d", ipBase+1), vipPort, zmqPort, []*pdfake.Engine{a, b}, dec))
			if rows := inventory(); bind && len(rows) > 0 && rows[0].Source != kvplane.SourceBind {
				// --kv-bind-addr binds daemon.Options.KV.BindAddr, the KV
				// plane's own option, for the bind topology to take effect.
				t.Skipf("--kv-bind-addr not passed to the KV plane by daemon/runtime.go yet (source %q)", rows[0].Source)
			}
			for _, e := range []*pdfake.Engine{a, b} {
				if err := e.KVPublisher().WaitSubscribers(1, kvWait); err != nil {
					t.Fatal(err)
				}
			}
			if rows := inventory(); len(rows) != 2 {
				t.Fatalf("inventory rows = %+v, want one per prefill", rows)
			}
			// The rule serves once probes pass.
			kvEventually(t, "the VIP serves", func() bool { return kvVIPPost(vip, kvPromptA) == nil })
			owner, other := a, b
			if len(b.Records()) > len(a.Records()) {
				owner, other = b, a
			}
			kvEventually(t, "the owner's blocks indexed and trusted", func() bool {
				r, ok := kvRow(inventory(), owner.AddrPort().String())
				return ok && r.Blocks == 3 && r.Trusted
			})
			hitsBefore := kvMetric(t, d.URL, "loxilb_pd_kv_tier15_hits_total", `rule="kv-e2e"`)
			ownerBefore, otherBefore := len(owner.Records()), len(other.Records())
			const n = 6
			for i := 0; i < n; i++ {
				if err := kvVIPPost(vip, kvPromptA+kvSuffix+fmt.Sprint(" turn", i)); err != nil {
					t.Fatal(err)
				}
			}
			if got := len(owner.Records()) - ownerBefore; got != n || len(other.Records()) != otherBefore {
				t.Fatalf("owner got %d of %d prefix-sharing prompts, the other %d", got, n, len(other.Records())-otherBefore)
			}
			if got := kvMetric(t, d.URL, "loxilb_pd_kv_tier15_hits_total", `rule="kv-e2e"`) - hitsBefore; got < n {
				t.Fatalf("loxilb_pd_kv_tier15_hits_total moved by %v, want ≥ %d", got, n)
			}
			if bind {
				return // no per-engine connection: restart detection is the dialled topology's test
			}
			kvPostOK(t, "http://"+owner.AddrPort().String()+"/admin/kv/restart", "")
			// The restarted engine's stream from seq 0 is seen whole: the
			// owner is cleared and counted, and trusted at once.
			kvEventually(t, "restart cleared the owner", func() bool {
				r, _ := kvRow(inventory(), owner.AddrPort().String())
				return r.Blocks == 0 && r.Trusted && kvMetric(t, d.URL, "loxilb_kv_restarts_total", `endpoint="`+owner.AddrPort().String()+`"`) == 1
			})
		})
	}
	t.Run("single-pool", func(t *testing.T) { kvDaemonSinglePool(t, bin) })
	t.Run("trtllm-pd", func(t *testing.T) { kvDaemonTRTLLM(t, bin) })
	t.Run("trtllm-pd-in-process-tokenizer", func(t *testing.T) { kvDaemonTRTLLMLocalTokenizer(t, bin) })
	t.Run("events-stop", func(t *testing.T) { kvDaemonEventsStop(t, bin) })
}

// kvDaemonSinglePool is kvExactMode 3: a round-robin single pool
// whose engines publish events; prompts sharing a cached prefix stick to
// the engine holding it instead of alternating, and a prompt nobody holds
// keeps the rule's own selector.
func kvDaemonSinglePool(t *testing.T, bin string) {
	d := kvDaemon(t, bin, "--kv-tokenize-timeout", "2s")
	zmqPort := kvFreePort(t)
	kv := pdfake.KVConfig{ZMQPort: int(zmqPort), BlockSize: kvBlock}
	// Role-less pool members: the vLLM fake answers whole requests either
	// way (it records the missing P/D params as a soft violation).
	a := kvFake(t, "127.0.0.232", pdfake.Prefill, kv)
	b := kvFake(t, "127.0.0.233", pdfake.Prefill, kv)
	vipPort := cliFreePort(t)
	vip := fmt.Sprintf("127.0.0.231:%d", vipPort)
	var eps []string
	for _, e := range []*pdfake.Engine{a, b} {
		eps = append(eps, fmt.Sprintf(`{"endpointIP":%q,"targetPort":%d,"weight":1}`, e.AddrPort().Addr(), e.AddrPort().Port()))
	}
	rule := fmt.Sprintf(`{"serviceArguments":{"externalIP":"127.0.0.231","port":%d,"protocol":"tcp","sel":0,"mode":4,"name":"kv-pool-e2e",`+
		`"kvExactMode":3,"kvEngineType":"vllm","kvZmqPort":%d,"kvBlockSize":%d,"kvWarmupSec":1,"probetype":"http","probereq":"/health"},"endpoints":[%s]}`,
		vipPort, zmqPort, kvBlock, strings.Join(eps, ","))
	kvPostOK(t, d.URL+"/netlox/v1/config/loadbalancer", rule)
	for _, e := range []*pdfake.Engine{a, b} {
		if err := e.KVPublisher().WaitSubscribers(1, kvWait); err != nil {
			t.Fatal(err)
		}
	}
	kvEventually(t, "the VIP serves", func() bool { return kvVIPPost(vip, kvPromptA) == nil })
	owner, other := a, b
	if len(b.Records()) > len(a.Records()) {
		owner, other = b, a
	}
	kvEventually(t, "the owner's blocks indexed and trusted", func() bool {
		var inv kvInventoryResp
		kvGetJSON(t, d.URL+"/netlox/v1/config/ai/kv/inventory", &inv)
		r, ok := kvRow(inv.Rows, owner.AddrPort().String())
		return ok && r.Blocks == 3 && r.Trusted
	})
	ownerBefore, otherBefore := len(owner.Records()), len(other.Records())
	const n = 6
	for i := 0; i < n; i++ {
		if err := kvVIPPost(vip, kvPromptA+kvSuffix+fmt.Sprint(" turn", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(owner.Records()) - ownerBefore; got != n || len(other.Records()) != otherBefore {
		t.Fatalf("owner got %d of %d prefix-sharing prompts under round robin, the other %d", got, n, len(other.Records())-otherBefore)
	}
	// Unknown prompts keep round robin: both engines get some.
	ownerBefore, otherBefore = len(owner.Records()), len(other.Records())
	for i := 0; i < 4; i++ {
		if err := kvVIPPost(vip, fmt.Sprintf("fresh prompt number %d with nothing cached anywhere at all", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(owner.Records()) == ownerBefore || len(other.Records()) == otherBefore {
		t.Fatalf("misses did not keep the rule's round robin: owner +%d, other +%d",
			len(owner.Records())-ownerBefore, len(other.Records())-otherBefore)
	}
}

// kvDaemonTRTLLM: a TensorRT-LLM P/D rule with kvExactMode 1. The
// context servers have no PUB socket; the daemon drains their
// /kv_cache_events (--kv-trt-poll-interval) into the inventory. Clients send
// token ids (trtllm-serve has no /tokenize), and prompts sharing a cached
// prefix follow it; a restart (event_id back to 0) clears the endpoint.
func kvDaemonTRTLLM(t *testing.T, bin string) {
	d := kvDaemon(t, bin, "--kv-trt-poll-interval", "10ms")
	start := func(ip string, role pdfake.Role, kv pdfake.KVConfig) *pdfake.Engine {
		cfg := pdfake.DefaultConfig(pdfake.TRTLLM, role)
		cfg.Addr, cfg.Model, cfg.KV = ip+":0", kvModel, kv
		e, err := pdfake.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	kv := pdfake.KVConfig{BlockSize: kvBlock}
	a := start("127.0.0.242", pdfake.Prefill, kv)
	b := start("127.0.0.243", pdfake.Prefill, kv)
	gen := start("127.0.0.244", pdfake.Decode, pdfake.KVConfig{})
	vipPort := cliFreePort(t)
	vip := fmt.Sprintf("127.0.0.241:%d", vipPort)
	rule := strings.Replace(kvRuleJSON("127.0.0.241", vipPort, 0, []*pdfake.Engine{a, b}, gen), `"kvEngineType":"vllm","kvZmqPort":0,`, `"kvEngineType":"trtllm",`, 1)
	rule = strings.Replace(rule, `"name":"kv-e2e"`, `"name":"kv-trt-e2e"`, 1)
	kvPostOK(t, d.URL+"/netlox/v1/config/loadbalancer", rule)
	ids := func(words string) string { return strings.ReplaceAll(fmt.Sprint(pdfake.FakeTokens(words)), " ", ",") }
	post := func(prompt string) error { return kvVIPPostPrompt(vip, ids(prompt)) }
	inventory := func() []kvplane.InventoryRow {
		var inv kvInventoryResp
		kvGetJSON(t, d.URL+"/netlox/v1/config/ai/kv/inventory", &inv)
		return inv.Rows
	}
	if rows := inventory(); len(rows) != 2 || rows[0].Source != kvplane.SourceTRT {
		t.Fatalf("inventory rows = %+v, want two trtllm_poll rows", rows)
	}
	kvEventually(t, "the VIP serves", func() bool { return post(kvPromptA) == nil })
	owner, other := a, b
	if len(b.Records()) > len(a.Records()) {
		owner, other = b, a
	}
	kvEventually(t, "the owner's drained blocks indexed and trusted", func() bool {
		r, ok := kvRow(inventory(), owner.AddrPort().String())
		return ok && r.Blocks == 3 && r.Trusted
	})
	ownerBefore, otherBefore := len(owner.Records()), len(other.Records())
	const n = 4
	for i := 0; i < n; i++ {
		if err := post(kvPromptA + kvSuffix + fmt.Sprint(" turn", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(owner.Records()) - ownerBefore; got != n || len(other.Records()) != otherBefore {
		t.Fatalf("owner got %d of %d prefix-sharing prompts, the other %d", got, n, len(other.Records())-otherBefore)
	}
	if got := kvMetric(t, d.URL, "loxilb_pd_kv_trt_polls_total", `result="ok"`); got == 0 {
		t.Fatal("no successful TensorRT-LLM drains counted")
	}
	// A restart: the engine's events restart at event_id 0 with "created"
	// at its next allocation. Until the gateway sees that, the old inventory
	// still routes the prefix there, which is that allocation.
	kvPostOK(t, "http://"+owner.AddrPort().String()+"/admin/kv/restart", "")
	if err := post(kvPromptA + " once more"); err != nil {
		t.Fatal(err)
	}
	kvEventually(t, "the restart seen (event_id back to 0) and the owner cleared", func() bool {
		return kvMetric(t, d.URL, "loxilb_kv_restarts_total", `endpoint="`+owner.AddrPort().String()+`"`) == 1
	})
}

// kvDaemonTRTLLMLocalTokenizer: TensorRT-LLM has no /tokenize,
// so with text prompts Tier 1.5 needs the in-process tokenizer. The daemon
// runs with --kv-tokenizer (Qwen3's tokenizer.json, the bpe fixture) and
// the context servers tokenise with the same file, like real engines
// serving that model: prompts sharing a cached prefix follow it, counted as
// Tier 1.5 hits and in-process tokenisations.
func kvDaemonTRTLLMLocalTokenizer(t *testing.T, bin string) {
	dir := filepath.Join("..", "..", "kvexact", "bpe", "testdata", "qwen3")
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := bpe.LoadFile(filepath.Join(abs, "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	d := kvDaemon(t, bin, "--kv-trt-poll-interval", "10ms", "--kv-tokenizer", kvModel+"="+abs)
	start := func(ip string, role pdfake.Role, kv pdfake.KVConfig) *pdfake.Engine {
		cfg := pdfake.DefaultConfig(pdfake.TRTLLM, role)
		cfg.Addr, cfg.Model, cfg.KV = ip+":0", kvModel, kv
		e, err := pdfake.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	kv := pdfake.KVConfig{BlockSize: kvBlock, Tokenizer: tok}
	a := start("127.0.0.252", pdfake.Prefill, kv)
	b := start("127.0.0.253", pdfake.Prefill, kv)
	gen := start("127.0.0.254", pdfake.Decode, pdfake.KVConfig{})
	vipPort := cliFreePort(t)
	vip := fmt.Sprintf("127.0.0.251:%d", vipPort)
	rule := strings.Replace(kvRuleJSON("127.0.0.251", vipPort, 0, []*pdfake.Engine{a, b}, gen), `"kvEngineType":"vllm","kvZmqPort":0,`, `"kvEngineType":"trtllm",`, 1)
	rule = strings.Replace(rule, `"name":"kv-e2e"`, `"name":"kv-trt-tok"`, 1)
	kvPostOK(t, d.URL+"/netlox/v1/config/loadbalancer", rule)
	inventory := func() []kvplane.InventoryRow {
		var inv kvInventoryResp
		kvGetJSON(t, d.URL+"/netlox/v1/config/ai/kv/inventory", &inv)
		return inv.Rows
	}
	kvEventually(t, "the VIP serves", func() bool { return kvVIPPost(vip, kvPromptA) == nil })
	owner, other := a, b
	if len(b.Records()) > len(a.Records()) {
		owner, other = b, a
	}
	want := len(tok.Encode(kvPromptA, true)) / kvBlock
	kvEventually(t, "the owner's drained blocks indexed and trusted", func() bool {
		r, ok := kvRow(inventory(), owner.AddrPort().String())
		return ok && r.Blocks == want && r.Trusted
	})
	hitsBefore := kvMetric(t, d.URL, "loxilb_pd_kv_tier15_hits_total", `rule="kv-trt-tok"`)
	ownerBefore, otherBefore := len(owner.Records()), len(other.Records())
	const n = 4
	for i := 0; i < n; i++ {
		if err := kvVIPPost(vip, kvPromptA+kvSuffix+fmt.Sprint(" turn", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(owner.Records()) - ownerBefore; got != n || len(other.Records()) != otherBefore {
		t.Fatalf("owner got %d of %d prefix-sharing text prompts, the other %d", got, n, len(other.Records())-otherBefore)
	}
	if got := kvMetric(t, d.URL, "loxilb_pd_kv_tier15_hits_total", `rule="kv-trt-tok"`) - hitsBefore; got < n {
		t.Fatalf("loxilb_pd_kv_tier15_hits_total moved by %v, want ≥ %d", got, n)
	}
	if got := kvMetric(t, d.URL, "loxilb_kv_local_tokenize_total", `rule="kv-trt-tok"`, `result="ok"`); got < n {
		t.Fatalf("in-process tokenisations = %v, want ≥ %d", got, n)
	}
}
