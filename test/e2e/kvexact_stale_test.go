package e2e

import (
	"fmt"
	"testing"

	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/kvexact"
)

// kvDaemonEventsStop: an engine whose KV feed stops while its ZMQ socket
// stays connected (a stuck publisher) keeps serving and keeps winning Tier
// 1.5 on what it once announced. Once work sent to it has waited
// --kv-stale-after for an event it is untrusted ("stale") and Tier 1.5
// stops steering to it; its next event makes it trusted again.
func kvDaemonEventsStop(t *testing.T, bin string) {
	zmqPort := kvFreePort(t)
	kv := pdfake.KVConfig{ZMQPort: int(zmqPort), BlockSize: kvBlock}
	d := kvDaemon(t, bin, "--kv-tokenize-timeout", "2s", "--kv-stale-after", "2s")
	inventory := func() []kvplane.InventoryRow {
		var inv kvInventoryResp
		kvGetJSON(t, d.URL+"/netlox/v1/config/ai/kv/inventory", &inv)
		return inv.Rows
	}
	a := kvFake(t, "127.0.0.247", pdfake.Prefill, kv)
	b := kvFake(t, "127.0.0.248", pdfake.Prefill, kv)
	dec := kvFake(t, "127.0.0.249", pdfake.Decode, pdfake.KVConfig{})
	vipPort := cliFreePort(t)
	vip := fmt.Sprintf("127.0.0.246:%d", vipPort)
	kvPostOK(t, d.URL+"/netlox/v1/config/loadbalancer", kvRuleJSON("127.0.0.246", vipPort, zmqPort, []*pdfake.Engine{a, b}, dec))
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
	ownerID := owner.AddrPort().String()
	kvEventually(t, "the owner's blocks indexed and trusted", func() bool {
		r, ok := kvRow(inventory(), ownerID)
		return ok && r.Blocks > 0 && r.Trusted
	})

	// The feed stops; the engine keeps serving and its socket stays up.
	kvPostOK(t, "http://"+ownerID+"/admin/kv/stop", "")
	ownerBefore, otherBefore := len(owner.Records()), len(other.Records())
	if err := kvVIPPost(vip, kvPromptA+kvSuffix+" while silent"); err != nil {
		t.Fatal(err)
	}
	if len(owner.Records()) != ownerBefore+1 || len(other.Records()) != otherBefore {
		t.Fatalf("the silent owner should still win Tier 1.5 on its announced prefix before --kv-stale-after")
	}
	kvEventually(t, "the silent owner untrusted as stale", func() bool {
		r, _ := kvRow(inventory(), ownerID)
		return r.Connected && !r.Trusted && r.Reason == kvexact.ReasonStale && r.Blocks > 0
	})
	missesBefore := kvMetric(t, d.URL, "loxilb_pd_kv_tier15_misses_total", `rule="kv-e2e"`)
	if err := kvVIPPost(vip, kvPromptA+kvSuffix+" still silent"); err != nil {
		t.Fatal(err)
	}
	if got := kvMetric(t, d.URL, "loxilb_pd_kv_tier15_misses_total", `rule="kv-e2e"`) - missesBefore; got < 1 {
		t.Errorf("a stale owner's prefix must be a Tier 1.5 miss; misses moved by %v", got)
	}

	// The feed resumes: the owner's next event restores trust. Tier 2
	// spreads distinct prompts, so the owner gets one within a few.
	kvPostOK(t, "http://"+ownerID+"/admin/kv/start", "")
	for i := 0; i < 20; i++ {
		if r, _ := kvRow(inventory(), ownerID); r.Trusted {
			break
		}
		if err := kvVIPPost(vip, fmt.Sprintf("%s fresh prompt number %d", kvPromptB, i)); err != nil {
			t.Fatal(err)
		}
	}
	kvEventually(t, "the owner trusted again after its next event", func() bool {
		r, _ := kvRow(inventory(), ownerID)
		return r.Trusted
	})

	// Killed and restarted on the same address: the new engine's cache is
	// empty, so the inventory must not come back trusted with the old
	// blocks once the subscriber reconnects and warms up.
	kvEventually(t, "the owner holds blocks before the kill", func() bool {
		r, _ := kvRow(inventory(), ownerID)
		return r.Blocks > 0
	})
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	kvEventually(t, "the killed owner disconnected", func() bool {
		r, _ := kvRow(inventory(), ownerID)
		return !r.Connected
	})
	cfg := pdfake.DefaultConfig(pdfake.VLLM, pdfake.Prefill)
	cfg.Addr, cfg.Model, cfg.KV = ownerID, kvModel, kv
	reborn, err := pdfake.Start(cfg)
	if err != nil {
		t.Fatalf("restart the owner on %s: %v", ownerID, err)
	}
	t.Cleanup(func() { _ = reborn.Close() })
	if err := reborn.KVPublisher().WaitSubscribers(1, kvWait); err != nil {
		t.Fatal(err)
	}
	kvEventually(t, "the restarted owner connected, cleared and trusted after warm-up", func() bool {
		r, _ := kvRow(inventory(), ownerID)
		return r.Connected && r.Trusted && r.Blocks == 0
	})
}
