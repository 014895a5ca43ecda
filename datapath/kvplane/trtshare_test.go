package kvplane

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/spec"
)

// TestTRTDrainSharedByRules: two KV-exact rules naming one TensorRT-LLM
// engine (a fake speaking its /kv_cache_events wire format) share its
// destructive drain, so both inventories see every event though requests
// reach the engine through neither; a compatible update of one rule keeps
// its feed unbroken, and a rule added later starts untrusted (warm-up) and
// indexes what is drained from then on.
func TestTRTDrainSharedByRules(t *testing.T) {
	const bs = 4
	cfg := pdfake.DefaultConfig(pdfake.TRTLLM, pdfake.Decode)
	cfg.KV = pdfake.KVConfig{BlockSize: bs}
	e, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	o := DefaultOptions()
	o.TRTPollInterval = time.Millisecond
	p := New(o, nil, nil)
	defer p.Close()

	engine := spec.Endpoint{ID: e.AddrPort().String(), Addr: e.AddrPort(), Weight: 1}
	rule := func(port uint16, name string, warmup time.Duration) *spec.Rule {
		r := pdRule(spec.KV{Mode: 3, BlockSize: bs, Warmup: warmup}, engine)
		r.Key.Port, r.Name, r.Engine, r.PD = port, name, spec.EngineTRTLLM, nil
		return r
	}
	ra, rb := rule(80, "a", time.Nanosecond), rule(81, "b", time.Nanosecond)
	a, err := p.Install(nil, ra)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Install(nil, rb)
	if err != nil {
		t.Fatal(err)
	}

	// Each prompt is two full blocks, stored in one event ("created" comes
	// first, with the first allocation).
	prompt := func(i int) string { return fmt.Sprintf("p%d a b c d e f g", i) }
	send := func(from, to int) {
		for i := from; i < to; i++ {
			trtComplete(t, "http://"+engine.ID, cfg.Model, prompt(i))
		}
	}
	// seesAll waits until inv indexes both blocks of every prompt in
	// [from, to) and expects event_id next-1 last.
	seesAll := func(name string, inv *kvexact.Inventory, from, to int, next uint64) {
		t.Helper()
		held := func() (n int) {
			for i := from; i < to; i++ {
				if inv.ScoreTokens(pdfake.FakeTokens(prompt(i)), []string{engine.ID})[0].Blocks == 2 {
					n++
				}
			}
			return n
		}
		deadline := time.Now().Add(5 * time.Second)
		for held() != to-from || seq(inv, engine.ID) != next {
			if time.Now().After(deadline) {
				t.Fatalf("rule %s indexes %d of prompts [%d,%d), next event %d (want %d): the drain was not shared",
					name, held(), from, to, seq(inv, engine.ID), next)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}

	// Events drained before a rule's first drain are not its: send once
	// both are fed.
	fed := func(inv *kvexact.Inventory, want string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			if _, why := inv.Trusted(engine.ID); why == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("inventory never fed (want trust reason %q)", want)
			}
		}
	}
	fed(a.Inventory(), "")
	fed(b.Inventory(), "")
	send(0, 6)
	seesAll("a", a.Inventory(), 0, 6, 7)
	seesAll("b", b.Inventory(), 0, 6, 7)

	// A compatible update (same KV settings and endpoint) keeps a's feed:
	// no event lost or applied twice, so its stream has no gap.
	ra2 := rule(80, "a", time.Nanosecond)
	ra2.Generation = 2
	a2, err := p.Install(ra, ra2)
	if err != nil {
		t.Fatal(err)
	}
	if a2.Inventory() != a.Inventory() {
		t.Fatal("a compatible update replaced the inventory")
	}
	// A rule added later joins the running drain as a fresh feed.
	c, err := p.Install(nil, rule(82, "c", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	fed(c.Inventory(), kvexact.ReasonWarmup)
	send(6, 9)
	seesAll("a", a2.Inventory(), 0, 9, 10)
	seesAll("b", b.Inventory(), 0, 9, 10)
	seesAll("c", c.Inventory(), 6, 9, 10)
	if ok, why := c.Inventory().Trusted(engine.ID); ok || why != kvexact.ReasonWarmup {
		t.Fatalf("the later rule is trusted=%v (%s), want untrusted for warm-up", ok, why)
	}
	for name, inv := range map[string]*kvexact.Inventory{"a": a2.Inventory(), "b": b.Inventory()} {
		if ok, why := inv.Trusted(engine.ID); !ok {
			t.Fatalf("rule %s untrusted (%s): its feed had a gap", name, why)
		}
	}

	// Removing two of the three rules leaves the drain feeding the third.
	p.Remove(a2)
	p.Remove(c)
	send(9, 10)
	seesAll("b", b.Inventory(), 0, 10, 11)
}

// seq is the next event id inv expects from endpoint (0 before any).
func seq(inv *kvexact.Inventory, endpoint string) uint64 {
	n, _ := inv.NextSeq(endpoint, 0)
	return n
}

// trtComplete sends one completion straight to the engine (not through a
// rule), so it computes and announces the prompt's blocks.
func trtComplete(t *testing.T, base, model, prompt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body := `{"model":"` + model + `","prompt":"` + prompt + `","max_tokens":1}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: status %d", resp.StatusCode)
	}
}
