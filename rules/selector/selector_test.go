package selector_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/selector"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// compiled compiles a selector rule through the real rules package.
func compiled(t *testing.T, edit func(*rules.Rule)) *spec.Rule {
	t.Helper()
	r := rules.Rule{
		ServiceArguments: rules.ServiceArguments{ExternalIP: "127.0.0.1", Port: 2020, Protocol: "tcp", Mode: 4,
			PDDisaggMode: true, KVEngineType: "sglang"},
		EndpointSelector: &rules.EndpointSelector{Model: "m"},
	}
	if edit != nil {
		edit(&r)
	}
	c, err := rules.Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	c.Generation = 1
	return c
}

func entry(key string, g etcdstore.Registration) etcdstore.EngineEntry {
	e := etcdstore.EngineEntry{Key: key, Registration: g}
	if err := g.Validate(); err != nil {
		e.Refused = err.Error()
	}
	return e
}

func TestResolve(t *testing.T) {
	pd := compiled(t, nil)
	kv := compiled(t, func(r *rules.Rule) {
		r.ServiceArguments.KVEngineType, r.ServiceArguments.KVExactMode, r.ServiceArguments.KVBlockSize = "vllm", 1, 16
	})
	plain := compiled(t, func(r *rules.Rule) { r.ServiceArguments.PDDisaggMode = false })
	prefill := etcdstore.Registration{URL: "http://127.0.0.2:8000", Role: "prefill", Engine: "sglang", Model: "m", BootstrapPort: 8998}
	decode := etcdstore.Registration{URL: "http://127.0.0.3:8000", Role: "decode", Engine: "sglang", Model: "m", BlockSize: 32, KVConnector: "mooncake"}
	tests := []struct {
		name    string
		rule    *spec.Rule
		reg     etcdstore.Registration
		class   string // "" = used
		inWords string
	}{
		{"sglang prefill", pd, prefill, "", ""},
		{"sglang decode with pair facts", pd, decode, "", ""},
		{"other model is not selected", pd, func() etcdstore.Registration { g := decode; g.Model = "other"; return g }(), "skip", ""},
		{"foreign engine", pd, func() etcdstore.Registration { g := decode; g.Engine = "trtllm"; return g }(), selector.ReasonEngine, "kvEngineType is sglang"},
		{"prefill without bootstrap", pd, func() etcdstore.Registration { g := prefill; g.BootstrapPort = 0; return g }(), selector.ReasonInvalid, "bootstrap_port"},
		{"prefill on its own bootstrap port", pd, func() etcdstore.Registration { g := prefill; g.BootstrapPort = 9000; return g }(), "", ""},
		{"bad label", pd, func() etcdstore.Registration { g := decode; g.Labels = map[string]string{"a b": "x"}; return g }(), selector.ReasonInvalid, "labels.a b"},
		{"bootstrap on a vLLM NIXL prefill", kv, etcdstore.Registration{URL: "http://127.0.0.4:8000", Role: "prefill", Engine: "vllm", Model: "m", BootstrapPort: 8999}, selector.ReasonInvalid, "bootstrap_port"},
		{"prefill on a plain rule", plain, prefill, selector.ReasonRole, "pd_disagg_mode"},
		{"block size the KV rule contradicts", kv, etcdstore.Registration{URL: "http://127.0.0.4:8000", Role: "decode", Engine: "vllm", Model: "m", BlockSize: 32}, selector.ReasonKV, "kvBlockSize 16"},
		{"foreign ZMQ port", kv, etcdstore.Registration{URL: "http://127.0.0.4:8000", Role: "decode", Engine: "vllm", Model: "m", KVZmqPort: 6000}, selector.ReasonKV, "kvZmqPort"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := tc.reg.Addr()
			got, refused := selector.Resolve(tc.rule, []etcdstore.EngineEntry{entry(addr.String(), tc.reg)})
			switch tc.class {
			case "":
				if len(got.Endpoints) != 1 || len(refused) != 0 || got.Endpoints[0].ID != addr.String() {
					t.Fatalf("endpoints %+v refused %v", got.Endpoints, refused)
				}
			case "skip":
				if len(got.Endpoints) != 0 || len(refused) != 0 {
					t.Fatalf("endpoints %+v refused %v", got.Endpoints, refused)
				}
			default:
				r, ok := refused[addr.String()]
				if len(got.Endpoints) != 0 || !ok || r.Class != tc.class || !strings.Contains(r.Reason, tc.inWords) {
					t.Fatalf("endpoints %+v refused %+v, want %s naming %q", got.Endpoints, refused, tc.class, tc.inWords)
				}
			}
		})
	}
	got, _ := selector.Resolve(pd, []etcdstore.EngineEntry{entry("127.0.0.3:8000", decode)})
	if f := got.Endpoints[0].PairFacts; f[selector.FactBlockSize] != "32" || f[selector.FactKVConnector] != "mooncake" {
		t.Fatalf("pair facts %v", f)
	}

	// A registration carries a static endpoint's bootstrap_port and labels:
	// an SGLang prefill's own port, a vLLM Mooncake prefill's, free labels.
	own := prefill
	own.BootstrapPort, own.Labels = 9000, map[string]string{"zone": "a"}
	mooncake := etcdstore.Registration{URL: "http://127.0.0.5:8000", Role: "prefill", Engine: "vllm", Model: "m",
		KVConnector: "MooncakeConnector", BootstrapPort: 8999, Labels: map[string]string{"kv_engine_id": "e-1"}}
	for _, tc := range []struct {
		rule *spec.Rule
		reg  etcdstore.Registration
	}{{pd, own}, {kv, mooncake}} {
		addr, _ := tc.reg.Addr()
		got, refused := selector.Resolve(tc.rule, []etcdstore.EngineEntry{entry(addr.String(), tc.reg)})
		if len(got.Endpoints) != 1 || len(refused) != 0 {
			t.Fatalf("%s: endpoints %+v refused %v", addr, got.Endpoints, refused)
		}
		ep := got.Endpoints[0]
		if int(ep.BootstrapPort) != tc.reg.BootstrapPort || len(ep.Labels) != 1 || ep.Labels["zone"]+ep.Labels["kv_engine_id"] == "" {
			t.Errorf("%s: bootstrap_port %d labels %v, want %d and %v", addr, ep.BootstrapPort, ep.Labels, tc.reg.BootstrapPort, tc.reg.Labels)
		}
	}
}

// recorder is the inner runtime: it keeps what is served per key.
type recorder struct {
	mu     sync.Mutex
	served map[spec.Key]*spec.Rule
}

func (r *recorder) Install(prev, next *spec.Rule) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if prev != nil && prev.Key != next.Key {
		delete(r.served, prev.Key)
	}
	r.served[next.Key] = next
	return nil
}

func (r *recorder) Remove(x *spec.Rule) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.served, x.Key)
}

func (r *recorder) Status(k spec.Key) (spec.RuleStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.served[k]
	if s == nil {
		return spec.RuleStatus{}, false
	}
	return spec.RuleStatus{Ready: len(s.Endpoints) > 0}, true
}

func (r *recorder) endpoints(k spec.Key) (ids []string, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.served[k]
	if s == nil {
		return nil, 0
	}
	for _, e := range s.Endpoints {
		ids = append(ids, e.ID+"/"+e.Role.String())
	}
	return ids, s.Generation
}

func register(t *testing.T, cli *clientv3.Client, prefix string, g etcdstore.Registration, ttl int64) clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := cli.Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := g.Addr()
	v, _ := json.Marshal(g)
	if _, err := cli.Put(ctx, prefix+"/engines/"+addr.String(), string(v), clientv3.WithLease(l.ID)); err != nil {
		t.Fatal(err)
	}
	return l.ID
}

func eventually(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRuntimeFollowsRegistrations: against a real etcd, a selector rule is
// installed with no endpoints (not ready, with a reason), gains each
// registration that it can use as it registers (a new generation each
// time), refuses and counts the others with their reason in status, and
// loses an engine whose lease expires or is revoked.
func TestRuntimeFollowsRegistrations(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	inner := &recorder{served: map[spec.Key]*spec.Rule{}}
	var mu sync.Mutex
	counted := map[string]int{}
	o := selector.DefaultOptions()
	o.Inner, o.Status, o.Client, o.Prefix = inner, inner, cli, "/sel"
	o.OnRefused = func(class string) { mu.Lock(); counted[class]++; mu.Unlock() }
	o.Log = logrus.New()
	sel := selector.New(o)
	defer sel.Close()

	rule := compiled(t, nil)
	if err := sel.Install(nil, rule); err != nil {
		t.Fatal(err)
	}
	st, _ := sel.Status(rule.Key)
	if st.Ready || !strings.Contains(st.Reason, "no usable registration") || !strings.Contains(st.Reason, "/sel/engines/") {
		t.Fatalf("empty selector rule status %+v", st)
	}

	prefill := etcdstore.Registration{URL: "http://127.0.0.2:8000", Role: "prefill", Engine: "sglang", Model: "m", BootstrapPort: 8998}
	decode := etcdstore.Registration{URL: "http://127.0.0.3:8000", Role: "decode", Engine: "sglang", Model: "m"}
	foreign := etcdstore.Registration{URL: "http://127.0.0.4:8000", Role: "decode", Engine: "vllm", Model: "m"}
	noBoot := etcdstore.Registration{URL: "http://127.0.0.5:8000", Role: "prefill", Engine: "sglang", Model: "m"}
	register(t, cli, "/sel", prefill, 30)
	register(t, cli, "/sel", decode, 2) // never kept alive: expires
	register(t, cli, "/sel", foreign, 30)
	register(t, cli, "/sel", noBoot, 30)

	want := "127.0.0.2:8000/prefill,127.0.0.3:8000/decode"
	eventually(t, 5*time.Second, "both engines served", func() bool {
		ids, _ := inner.endpoints(rule.Key)
		return strings.Join(ids, ",") == want
	})
	_, gen := inner.endpoints(rule.Key)
	if gen <= rule.Generation {
		t.Fatalf("re-install kept generation %d", gen)
	}
	eventually(t, 5*time.Second, "refusals in status", func() bool {
		st, _ := sel.Status(rule.Key)
		return strings.Contains(st.Refused["127.0.0.4:8000"], "engine: registered as vllm") &&
			strings.Contains(st.Refused["127.0.0.5:8000"], "bootstrap_port")
	})
	st, _ = sel.Status(rule.Key)
	if !st.Ready {
		t.Fatalf("status %+v", st)
	}
	mu.Lock()
	if counted[selector.ReasonEngine] != 1 || counted[selector.ReasonInvalid] != 1 {
		t.Fatalf("refusals counted %v, want one engine and one invalid", counted)
	}
	mu.Unlock()

	// An update of the rule (the store's new generation) keeps the
	// registered endpoints.
	upd := compiled(t, func(r *rules.Rule) { r.ServiceArguments.Name = "renamed" })
	upd.Generation = 2
	if err := sel.Install(rule, upd); err != nil {
		t.Fatal(err)
	}
	if ids, _ := inner.endpoints(rule.Key); strings.Join(ids, ",") != want {
		t.Fatalf("update served %v", ids)
	}

	// The decode's lease expires: it leaves; the refusal counts stay.
	eventually(t, 15*time.Second, "the expired decode to leave", func() bool {
		ids, _ := inner.endpoints(rule.Key)
		return strings.Join(ids, ",") == "127.0.0.2:8000/prefill"
	})
	mu.Lock()
	if counted[selector.ReasonEngine] != 1 {
		t.Fatalf("re-resolving recounted refusals: %v", counted)
	}
	mu.Unlock()

	sel.Remove(upd)
	if ids, _ := inner.endpoints(rule.Key); ids != nil {
		t.Fatalf("removed rule still served %v", ids)
	}
	if _, ok := sel.Status(rule.Key); ok {
		t.Fatal("removed rule has status")
	}
}

// TestWithoutRegistry: on the file store a selector rule is refused (400)
// and nothing is installed; static rules pass through.
func TestWithoutRegistry(t *testing.T) {
	inner := &recorder{served: map[spec.Key]*spec.Rule{}}
	rt := selector.WithoutRegistry(inner)
	err := rt.Install(nil, compiled(t, nil))
	if err == nil || !strings.Contains(err.Error(), "--store etcd://") {
		t.Fatalf("selector rule on the file store: %v", err)
	}
	static := compiled(t, nil)
	static.EndpointSelector = nil
	if err := rt.Install(nil, static); err != nil || len(inner.served) != 1 {
		t.Fatalf("static rule: %v, served %d", err, len(inner.served))
	}
}
