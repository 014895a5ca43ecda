package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// Bounds of the KV-exact end-to-end tests. Their engines live on
// 127.0.0.200–.250 (other e2e tests use lower addresses).
const (
	kvWarmup  = 2 * time.Second
	kvWait    = 10 * time.Second
	kvBlock   = 4
	kvModel   = "fake-model"
	kvPromptA = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
	kvPromptB = "one two three four five six seven eight nine ten eleven twelve"
	kvSuffix  = " and then some more words"
)

// kvFreePort finds a TCP port free on loopback; the fakes bind it on their
// own 127.0.0.x, like engines on separate hosts sharing kvZmqPort.
func kvFreePort(t *testing.T) uint16 { t.Helper(); return uint16(cliFreePort(t)) }

// kvFake starts a KV-publishing fake vLLM engine on ip.
func kvFake(t *testing.T, ip string, role pdfake.Role, kv pdfake.KVConfig) *pdfake.Engine {
	t.Helper()
	cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
	cfg.Addr, cfg.Model, cfg.KV = ip+":0", kvModel, kv
	e, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatalf("start fake %s: %v", ip, err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// kvPrefill sends one prefill leg to e, as the datapath would: the engine
// computes the prompt and publishes its new blocks.
func kvPrefill(t *testing.T, e *pdfake.Engine, prompt string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`, kvModel, prompt)
	kvPostOK(t, "http://"+e.AddrPort().String()+"/v1/completions", body)
}

func kvPostOK(t *testing.T, url, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kvWait)
	defer cancel()
	st, b, err := affPost(ctx, url, body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	if st/100 != 2 {
		t.Fatalf("POST %s: %d %s", url, st, b)
	}
}

func kvEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually(t, kvWait, what, cond)
}

func kvCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func kvQuietLog() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

type kvSetup struct {
	plane    *kvplane.Plane
	rk       *kvplane.RuleKV
	m        *metrics.Metrics
	a, b, d  *pdfake.Engine
	rule     *spec.Rule
	prefills []ladder.Candidate
	decodes  []ladder.Candidate
}

// kvPlaneOptions are the plane's defaults with a /tokenize bound a loaded
// test machine meets: the production 50 ms bounds a request's wait, and
// these tests check what the plane concludes from the engine's answer (a
// late answer turned a watchdog miss into tokenize_failed at load 24).
func kvPlaneOptions() kvplane.Options {
	o := kvplane.DefaultOptions()
	o.TokenizeTimeout = 10 * time.Second
	return o
}

// kvStart builds a vLLM P/D rule with kvExactMode 1 over two publishing
// prefill fakes and one decode, installed on a real Plane with real ZMQ.
func kvStart(t *testing.T, bind bool) *kvSetup {
	t.Helper()
	s := &kvSetup{m: metrics.New()}
	opts := kvPlaneOptions()
	port := kvFreePort(t)
	kv := pdfake.KVConfig{ZMQPort: int(port), BlockSize: kvBlock}
	if bind {
		opts.BindAddr = fmt.Sprintf("tcp://127.0.0.1:%d", port)
		kv = pdfake.KVConfig{ConnectAddr: opts.BindAddr, BlockSize: kvBlock, MapEncoding: true}
	}
	s.plane = kvplane.New(opts, s.m.KV, kvQuietLog())
	t.Cleanup(func() { _ = s.plane.Close() })
	s.a = kvFake(t, "127.0.0.202", pdfake.Prefill, kv)
	s.b = kvFake(t, "127.0.0.203", pdfake.Prefill, kv)
	s.d = kvFake(t, "127.0.0.204", pdfake.Decode, pdfake.KVConfig{})
	s.rule = &spec.Rule{
		Key:       spec.Key{VIP: netip.MustParseAddr("127.0.0.1"), Port: 18080, Protocol: "tcp"},
		Name:      "kv-e2e",
		Engine:    spec.EngineVLLM,
		PD:        &spec.PD{BalanceAbsThreshold: 3},
		KV:        &spec.KV{Mode: 1, ZMQPort: port, BlockSize: kvBlock, Warmup: kvWarmup},
		Endpoints: []spec.Endpoint{s.a.Endpoint(), s.b.Endpoint(), s.d.Endpoint()},
	}
	rk, err := s.plane.Install(nil, s.rule)
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	s.rk = rk
	// Dialled or dialling in, a publisher sees the subscription once the
	// connection is up; events before that would be lost (slow joiner).
	for _, e := range []*pdfake.Engine{s.a, s.b} {
		if err := e.KVPublisher().WaitSubscribers(1, kvWait); err != nil {
			t.Fatal(err)
		}
	}
	s.prefills = []ladder.Candidate{{ID: s.a.Endpoint().ID}, {ID: s.b.Endpoint().ID, Index: 1}}
	s.decodes = []ladder.Candidate{{ID: s.d.Endpoint().ID, Index: 2}}
	return s
}

// route runs the ladder with Tier 1.5 for a completion request.
func (s *kvSetup) route(t *testing.T, prompt string) ladder.Trace {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":8}`, kvModel, prompt)
	l := ladder.New(nil, s.rk.Tier(nil))
	tr, ok := l.SelectPair(&ladder.Facts{Ctx: context.Background(), Path: "/v1/completions", Model: kvModel, Body: []byte(body), Now: time.Now()},
		s.prefills, s.decodes)
	if !ok {
		t.Fatal("no pair")
	}
	return tr
}

func kvStep(tr ladder.Trace) ladder.Step {
	for _, st := range tr.Steps {
		if st.Tier == ladder.TierKVExact {
			return st
		}
	}
	return ladder.Step{}
}

// kvTrusted waits until every prefill's inventory is trusted.
func (s *kvSetup) waitTrusted(t *testing.T) {
	t.Helper()
	kvEventually(t, "trusted inventories", func() bool {
		for _, c := range s.prefills {
			if ok, _ := s.rk.Inventory().Trusted(c.ID); !ok {
				return false
			}
		}
		return true
	})
}

// TestKVExactPlaneRouting is the Runtime-free end-to-end test of KV-exact
// routing: real ZMQ publishers in fake vLLM prefills, the real Plane and
// subscribers, the engines' /tokenize, and the ladder with Tier 1.5.
func TestKVExactPlaneRouting(t *testing.T) {
	for _, bind := range []bool{false, true} {
		t.Run(fmt.Sprintf("bind=%v", bind), func(t *testing.T) {
			s := kvStart(t, bind)
			kvPrefill(t, s.a, kvPromptA)
			kvPrefill(t, s.b, kvPromptB)
			inv := s.rk.Inventory()
			kvEventually(t, "both prompts indexed", func() bool {
				return inv.Blocks(s.a.Endpoint().ID) == 3 && inv.Blocks(s.b.Endpoint().ID) == 3
			})
			s.waitTrusted(t)

			hits := s.m.KV.Routing.Tier15Hits.WithLabelValues(s.rule.Name)
			before := kvCounter(hits)
			for i := 0; i < 3; i++ {
				for _, tc := range []struct {
					prompt string
					want   *pdfake.Engine
				}{{kvPromptA + kvSuffix, s.a}, {kvPromptB + kvSuffix, s.b}} {
					tr := s.route(t, tc.prompt)
					if st := kvStep(tr); !st.Hit || tr.Prefill.ID != tc.want.Endpoint().ID {
						t.Fatalf("prompt %.10q… went to %s (tier 1.5 step %+v), want %s", tc.prompt, tr.Prefill.ID, st, tc.want.Endpoint().ID)
					}
				}
			}
			if got := kvCounter(hits) - before; got != 6 {
				t.Fatalf("loxilb_pd_kv_tier15_hits_total moved by %v, want 6", got)
			}
			rows := s.plane.KVInventory()
			if len(rows) != 2 || !rows[0].Trusted || rows[0].Blocks != 3 || rows[0].LastSeq == nil {
				t.Fatalf("inventory rows: %+v", rows)
			}

			// Engine a restarts: its inventory is cleared; the new stream is
			// seen from seq 0, so it is trusted at once, and its old prompt
			// is a miss.
			if bind {
				return // the bind topology has no per-engine connection to restart over
			}
			kvPostOK(t, "http://"+s.a.AddrPort().String()+"/admin/kv/restart", "")
			kvEventually(t, "restart cleared a", func() bool { return inv.Blocks(s.a.Endpoint().ID) == 0 })
			if ok, why := inv.Trusted(s.a.Endpoint().ID); !ok {
				t.Fatalf("a after a restart seen from seq 0: untrusted (%s)", why)
			}
			if st := kvStep(s.route(t, kvPromptA+kvSuffix)); st.Hit || st.Reason != ladder.ReasonMiss {
				t.Fatalf("a's old prompt after restart: step %+v, want a miss", st)
			}
			kvPrefill(t, s.a, kvPromptA)
			kvEventually(t, "a re-indexed", func() bool { return inv.Blocks(s.a.Endpoint().ID) == 3 })
			if tr := s.route(t, kvPromptA+kvSuffix); tr.Prefill.ID != s.a.Endpoint().ID || !kvStep(tr).Hit {
				t.Fatalf("after re-indexing: %+v", tr)
			}
		})
	}
}

// TestKVExactPlaneUpdate removes a prefill from the rule: its subscriber
// stops and its blocks leave the inventory, the other keeps its state.
func TestKVExactPlaneUpdate(t *testing.T) {
	s := kvStart(t, false)
	kvPrefill(t, s.a, kvPromptA)
	kvPrefill(t, s.b, kvPromptB)
	inv := s.rk.Inventory()
	kvEventually(t, "both prompts indexed", func() bool {
		return inv.Blocks(s.a.Endpoint().ID) == 3 && inv.Blocks(s.b.Endpoint().ID) == 3
	})
	next := *s.rule
	next.Generation++
	next.Endpoints = []spec.Endpoint{s.a.Endpoint(), s.d.Endpoint()}
	rk, err := s.plane.Install(s.rule, &next)
	if err != nil {
		t.Fatal(err)
	}
	if rk.Inventory() != inv {
		t.Fatal("an endpoint removal replaced the inventory")
	}
	if inv.Blocks(s.b.Endpoint().ID) != 0 || inv.Blocks(s.a.Endpoint().ID) != 3 {
		t.Fatalf("after removing b: a=%d b=%d blocks", inv.Blocks(s.a.Endpoint().ID), inv.Blocks(s.b.Endpoint().ID))
	}
	// b's subscriber is gone: what b publishes now is not indexed.
	kvPrefill(t, s.b, kvPromptA+kvSuffix)
	kvPrefill(t, s.a, kvPromptB)
	kvEventually(t, "a's new prompt indexed", func() bool { return inv.Blocks(s.a.Endpoint().ID) == 6 })
	if inv.Blocks(s.b.Endpoint().ID) != 0 {
		t.Fatal("a removed endpoint's events are still indexed")
	}
}

// TestKVExactPlaneReplay: with a replay port offset the subscriber rebuilds
// an engine's inventory from sequence 0 on connect, so blocks stored before
// the gateway subscribed are indexed and trusted at once, without warm-up.
func TestKVExactPlaneReplay(t *testing.T) {
	const offset = 1000
	var port uint16
	for i := 0; i < 20; i++ { // a port whose replay twin is free too
		port = kvFreePort(t)
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.205:%d", int(port)+offset)); err == nil {
			ln.Close()
			break
		}
	}
	a := kvFake(t, "127.0.0.205", pdfake.Prefill, pdfake.KVConfig{ZMQPort: int(port), ReplayPort: int(port) + offset, BlockSize: kvBlock})
	kvPrefill(t, a, kvPromptA) // before anyone subscribes: only replay can deliver it
	d := kvFake(t, "127.0.0.206", pdfake.Decode, pdfake.KVConfig{})
	opts := kvPlaneOptions()
	opts.ReplayPortOffset = offset
	plane := kvplane.New(opts, metrics.New().KV, kvQuietLog())
	defer plane.Close()
	rule := &spec.Rule{
		Key:    spec.Key{VIP: netip.MustParseAddr("127.0.0.1"), Port: 18081, Protocol: "tcp"},
		Name:   "kv-replay",
		Engine: spec.EngineVLLM,
		PD:     &spec.PD{},
		// A warm-up far longer than the test: only the replay rebuild trusts.
		KV:        &spec.KV{Mode: 1, ZMQPort: port, BlockSize: kvBlock, Warmup: time.Hour},
		Endpoints: []spec.Endpoint{a.Endpoint(), d.Endpoint()},
	}
	rk, err := plane.Install(nil, rule)
	if err != nil {
		t.Fatal(err)
	}
	id := a.Endpoint().ID
	kvEventually(t, "replayed blocks trusted", func() bool {
		ok, _ := rk.Inventory().Trusted(id)
		return ok && rk.Inventory().Blocks(id) == 3
	})
	idx, reason, ok := rk.Tier(nil).Pick(&ladder.Facts{Ctx: context.Background(), Path: "/v1/completions", Model: kvModel,
		Body: []byte(fmt.Sprintf(`{"model":%q,"prompt":%q}`, kvModel, kvPromptA+kvSuffix))}, []ladder.Candidate{{ID: id}})
	if !ok || idx != 0 {
		t.Fatalf("Tier 1.5 after replay: %d %q %v", idx, reason, ok)
	}
}

// TestKVExactPlaneZeroHitWatchdog: engines whose /tokenize disagrees with
// what they cache (a tokenizer parity failure) make every lookup miss while
// events flow; after N such lookups the watchdog warns once, naming the
// parity suspects, and counts it.
func TestKVExactPlaneZeroHitWatchdog(t *testing.T) {
	const n = 5
	port := kvFreePort(t)
	a := kvFake(t, "127.0.0.207", pdfake.Prefill, pdfake.KVConfig{ZMQPort: int(port), BlockSize: kvBlock, TokenizeSkew: true})
	d := kvFake(t, "127.0.0.208", pdfake.Decode, pdfake.KVConfig{})
	log := kvQuietLog()
	hook := &kvWarnHook{}
	log.AddHook(hook)
	m := metrics.New()
	opts := kvPlaneOptions()
	opts.WatchdogN = n
	plane := kvplane.New(opts, m.KV, log)
	defer plane.Close()
	rule := &spec.Rule{
		Key:       spec.Key{VIP: netip.MustParseAddr("127.0.0.1"), Port: 18082, Protocol: "tcp"},
		Name:      "kv-parity",
		Engine:    spec.EngineVLLM,
		PD:        &spec.PD{},
		KV:        &spec.KV{Mode: 1, ZMQPort: port, BlockSize: kvBlock, Warmup: 100 * time.Millisecond},
		Endpoints: []spec.Endpoint{a.Endpoint(), d.Endpoint()},
	}
	rk, err := plane.Install(nil, rule)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.KVPublisher().WaitSubscribers(1, kvWait); err != nil {
		t.Fatal(err)
	}
	kvPrefill(t, a, kvPromptA)
	id := a.Endpoint().ID
	kvEventually(t, "blocks indexed and trusted", func() bool {
		ok, _ := rk.Inventory().Trusted(id)
		return ok && rk.Inventory().Blocks(id) == 3
	})
	tier := rk.Tier(nil)
	for i := 0; i < 2*n; i++ {
		body := fmt.Sprintf(`{"model":%q,"prompt":%q}`, kvModel, kvPromptA+kvSuffix)
		if _, reason, ok := tier.Pick(&ladder.Facts{Ctx: context.Background(), Path: "/v1/completions", Model: kvModel, Body: []byte(body)},
			[]ladder.Candidate{{ID: id}}); ok || reason != ladder.ReasonMiss {
			t.Fatalf("lookup %d: ok %v reason %q, want a miss (the tokenizer disagrees)", i, ok, reason)
		}
	}
	if v := kvCounter(m.KV.Routing.ZeroHitWatchdog.WithLabelValues(rule.Name)); v != 1 {
		t.Fatalf("loxilb_pd_kv_zero_hit_watchdog_total = %v after %d zero-hit lookups with N=%d, want 1", v, 2*n, n)
	}
	if w := hook.warnings(); len(w) != 1 || !strings.Contains(w[0], "kvBlockSize") || !strings.Contains(w[0], "chat template") {
		t.Fatalf("watchdog warnings = %q, want one naming the parity suspects", w)
	}
}

// kvWarnHook records warning messages.
type kvWarnHook struct {
	mu   sync.Mutex
	msgs []string
}

func (h *kvWarnHook) Levels() []logrus.Level { return []logrus.Level{logrus.WarnLevel} }

func (h *kvWarnHook) Fire(e *logrus.Entry) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, e.Message)
	return nil
}

func (h *kvWarnHook) warnings() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}
