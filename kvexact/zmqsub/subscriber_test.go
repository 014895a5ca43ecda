package zmqsub_test

import (
	"net/url"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/internal/kvfake"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/zmqsub"
	"github.com/infergate/infergate/metrics"
)

const waitTimeout = 10 * time.Second

func quiet() logrus.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return l
}

type env struct {
	inv *kvexact.Inventory
	clk *kvfake.Clock
	m   *metrics.KV
}

func newEnv(t *testing.T) env {
	clk := kvfake.NewClock(time.Unix(1_800_000_000, 0))
	m := metrics.NewKV(prometheus.NewRegistry())
	o := kvexact.DefaultOptions("rule-a")
	o.Clock, o.Metrics, o.Logger, o.Warmup = clk, m, quiet(), time.Hour
	return env{kvexact.NewInventory(o), clk, m}
}

func subOpts(e env) zmqsub.Options {
	o := zmqsub.DefaultOptions("rule-a")
	o.Metrics, o.Logger, o.PollInterval, o.ReplayTimeout = e.m, quiet(), 20*time.Millisecond, 3*time.Second
	return o
}

// checkNoLeak fails the test if goroutines started during it outlive it.
func checkNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("goroutines: %d before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func portOf(t *testing.T, endpoint string) int {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startPub(t *testing.T, o kvfake.Options) *kvfake.Publisher {
	t.Helper()
	p, err := kvfake.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("publisher close: %v", err)
		}
	})
	return p
}

func startSub(t *testing.T, tgt zmqsub.Target, e env) *zmqsub.Subscriber {
	t.Helper()
	s, err := zmqsub.Start(tgt, e.inv, subOpts(e))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("subscriber close: %v", err)
		}
	})
	return s
}

func gauge(t *testing.T, g prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// prompt is 6 blocks of 16 tokens.
var promptTokens = func() []uint32 {
	out := make([]uint32, 96)
	for i := range out {
		out[i] = uint32(151000 - 7*i)
	}
	return out
}()

func storedBlocks(from, to int) kvfake.BlockStored {
	ev := kvfake.BlockStored{BlockSize: 16, TokenIDs: promptTokens[from*16 : to*16]}
	for b := from; b < to; b++ {
		ev.BlockHashes = append(ev.BlockHashes, 0xf000000000000000+uint64(b)) // > int64 max
	}
	if from > 0 {
		p := 0xf000000000000000 + uint64(from-1)
		ev.Parent = &p
	}
	return ev
}

func score(e env, ep string) kvexact.Score {
	return e.inv.Score(kvexact.KeysForTokens(promptTokens, 16), []string{ep, "other"})[0]
}

// TestSubscriberEndToEnd drives a real PUB socket → real SUB socket →
// inventory, for both event encodings.
func TestSubscriberEndToEnd(t *testing.T) {
	for _, tt := range []struct {
		name string
		enc  kvfake.Encoding
	}{
		{"array", kvfake.Encoding{}},
		{"map", kvfake.Encoding{MapEvents: true, Full: true, Hash: kvfake.HashInt64}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkNoLeak(t)
			e := newEnv(t)
			o := kvfake.DefaultOptions()
			o.Encoding = tt.enc
			pub := startPub(t, o)
			const ep = "10.1.1.1:8000"
			startSub(t, zmqsub.Target{Endpoint: ep, Host: "127.0.0.1", Port: portOf(t, pub.Endpoint())}, e)
			if err := pub.WaitSubscribers(1, waitTimeout); err != nil {
				t.Fatal(err)
			}
			connected := e.m.SubscriberConnected.WithLabelValues("rule-a", ep, "0")
			waitFor(t, "connected gauge", func() bool { return gauge(t, connected) == 1 })

			mustPublish(t, pub, storedBlocks(0, 4))
			mustPublish(t, pub, storedBlocks(4, 6))
			waitFor(t, "6 blocks scored", func() bool { return score(e, ep).Blocks == 6 })
			if ok, reason := e.inv.Trusted(ep); ok || reason != kvexact.ReasonWarmup {
				t.Errorf("Trusted = %v, %q; want warm-up", ok, reason)
			}
			e.clk.Advance(time.Hour)
			if ok, reason := e.inv.Trusted(ep); !ok {
				t.Errorf("after warm-up: Trusted = false, %q", reason)
			}

			mustPublish(t, pub, kvfake.BlockRemoved{BlockHashes: []uint64{0xf000000000000000 + 3}})
			waitFor(t, "removal applied", func() bool { return score(e, ep).Blocks == 3 })

			// A sequence gap (no replay socket): untrusted and cleared.
			next, _ := pub.Publish(kvfake.Batch{})
			if err := pub.PublishSeq(next+5, kvfake.Batch{Events: []any{storedBlocks(0, 2)}}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "gap detected", func() bool { ok, r := e.inv.Trusted(ep); return !ok && r == kvexact.ReasonSeqGap })
			waitFor(t, "post-gap store indexed", func() bool { return score(e, ep).Blocks == 2 })

			mustPublish(t, pub, kvfake.AllBlocksCleared{})
			waitFor(t, "cleared", func() bool { return e.inv.Blocks(ep) == 0 })
			if got := gauge(t, e.m.SeqGaps.WithLabelValues("rule-a", ep, "0")); got != 1 {
				t.Errorf("gaps metric = %v, want 1", got)
			}
		})
	}
}

func mustPublish(t *testing.T, p *kvfake.Publisher, evs ...any) {
	t.Helper()
	rank := 0
	if _, err := p.Publish(kvfake.Batch{TS: 1.8e9, Events: evs, Rank: &rank}); err != nil {
		t.Fatal(err)
	}
}

// TestSubscriberReplay: batches published before the subscriber connected
// are rebuilt from the ROUTER replay socket (trusted at once), and a lost
// live message is repaired by replay instead of clearing the inventory.
func TestSubscriberReplay(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	o := kvfake.DefaultOptions()
	o.ReplayAddr = "tcp://127.0.0.1:*"
	pub := startPub(t, o)
	mustPublish(t, pub, storedBlocks(0, 2)) // nobody listens yet
	mustPublish(t, pub, storedBlocks(2, 3))
	const ep = "10.1.1.2:8000"
	startSub(t, zmqsub.Target{Endpoint: ep, Host: "127.0.0.1", Port: portOf(t, pub.Endpoint()),
		ReplayPort: portOf(t, pub.ReplayEndpoint())}, e)
	waitFor(t, "replayed blocks", func() bool { return score(e, ep).Blocks == 3 })
	waitFor(t, "trusted by rebuild", func() bool { ok, _ := e.inv.Trusted(ep); return ok })
	if err := pub.WaitSubscribers(1, waitTimeout); err != nil {
		t.Fatal(err)
	}

	if _, err := pub.Drop(kvfake.Batch{Events: []any{storedBlocks(3, 5)}}); err != nil { // lost on the wire
		t.Fatal(err)
	}
	mustPublish(t, pub, storedBlocks(5, 6))
	waitFor(t, "gap repaired by replay", func() bool { return score(e, ep).Blocks == 6 })
	if ok, reason := e.inv.Trusted(ep); !ok {
		t.Errorf("Trusted after repaired gap = false, %q", reason)
	}
	if got := gauge(t, e.m.SeqGaps.WithLabelValues("rule-a", ep, "0")); got != 0 {
		t.Errorf("gaps metric = %v, want 0 (repaired)", got)
	}
	// The replay's metric is counted after its batches were applied.
	waitFor(t, "two ok replays", func() bool { return gauge(t, e.m.Replays.WithLabelValues("rule-a", ep, "ok")) == 2 })
}

// TestSubscriberRestart: the engine goes away and comes back on the same
// port with its sequence reset; the monitor reports both transitions and the
// regression clears the inventory.
func TestSubscriberRestart(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	pub1, err := kvfake.Start(kvfake.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	port := portOf(t, pub1.Endpoint())
	const ep = "10.1.1.3:8000"
	startSub(t, zmqsub.Target{Endpoint: ep, Host: "127.0.0.1", Port: port}, e)
	if err := pub1.WaitSubscribers(1, waitTimeout); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, pub1, storedBlocks(0, 2))
	mustPublish(t, pub1, storedBlocks(2, 4))
	waitFor(t, "4 blocks", func() bool { return score(e, ep).Blocks == 4 })
	if err := pub1.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "disconnected", func() bool { _, r := e.inv.Trusted(ep); return r == kvexact.ReasonDisconnected })

	o := kvfake.DefaultOptions()
	o.PubAddr = "tcp://127.0.0.1:" + strconv.Itoa(port)
	pub2 := startPub(t, o)
	if err := pub2.WaitSubscribers(1, waitTimeout); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, pub2, storedBlocks(0, 1)) // seq 0 again
	// A restart from the start of the stream is seen whole: cleared, then
	// trusted at once without warm-up.
	waitFor(t, "fresh inventory", func() bool { return score(e, ep).Blocks == 1 })
	if ok, r := e.inv.Trusted(ep); !ok {
		t.Errorf("after a restart seen from seq 0: Trusted = false, %q", r)
	}
	if got := gauge(t, e.m.Restarts.WithLabelValues("rule-a", ep, "0")); got != 1 {
		t.Errorf("restarts metric = %v, want 1", got)
	}
}

// TestBindTopology: the gateway binds one SUB socket; engines connect and are
// told apart by topic kv@<ip:port>@<model>.
func TestBindTopology(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	allowed := map[string]bool{"10.2.0.1:8000": true, "10.2.0.2:8000": true}
	s, addr, err := zmqsub.StartBind(zmqsub.BindTarget{Addr: "tcp://127.0.0.1:*", Allowed: func(ep string) bool { return allowed[ep] }}, e.inv, subOpts(e))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var pubs []*kvfake.Publisher
	for _, topic := range []string{"kv@10.2.0.1:8000@Qwen/Qwen3-0.6B", "kv@10.2.0.2:8000@Qwen/Qwen3-0.6B", "kv@10.9.9.9:8000@x"} {
		o := kvfake.DefaultOptions()
		o.ConnectAddr, o.Topic, o.Encoding = addr, topic, kvfake.Encoding{MapEvents: true}
		p := startPub(t, o)
		if err := p.WaitSubscribers(1, waitTimeout); err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, p)
	}
	mustPublish(t, pubs[0], storedBlocks(0, 5))
	mustPublish(t, pubs[1], storedBlocks(0, 2))
	mustPublish(t, pubs[2], storedBlocks(0, 6)) // not in the rule: dropped
	keys := kvexact.KeysForTokens(promptTokens, 16)
	waitFor(t, "both engines indexed", func() bool {
		s := e.inv.Score(keys, []string{"10.2.0.1:8000", "10.2.0.2:8000"})
		return s[0].Blocks == 5 && s[1].Blocks == 2
	})
	waitFor(t, "stranger counted", func() bool {
		return gauge(t, e.m.DecodeErrors.WithLabelValues("rule-a", "10.9.9.9:8000")) == 1
	})
	if e.inv.Blocks("10.9.9.9:8000") != 0 {
		t.Error("an endpoint outside the rule was indexed")
	}
}

// TestSubscriberIPv6 dials an engine on ::1 (skipped where loopback IPv6
// is unavailable).
func TestSubscriberIPv6(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	o := kvfake.DefaultOptions()
	o.PubAddr = "tcp://[::1]:*"
	pub, err := kvfake.Start(o)
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	const ep = "[fd00::1]:8000"
	startSub(t, zmqsub.Target{Endpoint: ep, Host: "::1", Port: portOf(t, pub.Endpoint())}, e)
	if err := pub.WaitSubscribers(1, waitTimeout); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, pub, storedBlocks(0, 2))
	waitFor(t, "blocks over IPv6", func() bool { return score(e, ep).Blocks == 2 })
}

func TestParseTopic(t *testing.T) {
	tests := []struct {
		topic, ep, model string
		ok               bool
	}{
		{"kv@10.0.0.1:8000@Qwen/Qwen3-0.6B", "10.0.0.1:8000", "Qwen/Qwen3-0.6B", true},
		{"kv@10.0.0.1@m@x", "10.0.0.1", "m@x", true},
		{"", "", "", false},
		{"kv@", "", "", false},
		{"kv@@m", "", "", false},
		{"xx@10.0.0.1@m", "", "", false},
	}
	for _, tt := range tests {
		ep, model, ok := zmqsub.ParseTopic(tt.topic)
		if ep != tt.ep || model != tt.model || ok != tt.ok {
			t.Errorf("ParseTopic(%q) = %q, %q, %v; want %q, %q, %v", tt.topic, ep, model, ok, tt.ep, tt.model, tt.ok)
		}
	}
}

// consecutivePubs binds n publishers on consecutive loopback ports (DP rank
// r publishes on base+r).
func consecutivePubs(t *testing.T, n int) []*kvfake.Publisher {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		first, err := kvfake.Start(kvfake.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		pubs := []*kvfake.Publisher{first}
		base := portOf(t, first.Endpoint())
		for r := 1; r < n; r++ {
			o := kvfake.DefaultOptions()
			o.PubAddr = "tcp://127.0.0.1:" + strconv.Itoa(base+r)
			p, err := kvfake.Start(o)
			if err != nil {
				break
			}
			pubs = append(pubs, p)
		}
		if len(pubs) == n {
			for _, p := range pubs {
				t.Cleanup(func() { _ = p.Close() })
			}
			return pubs
		}
		for _, p := range pubs {
			_ = p.Close()
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return nil
}

func publishRank(t *testing.T, p *kvfake.Publisher, rank int, evs ...any) {
	t.Helper()
	if _, err := p.Publish(kvfake.Batch{TS: 1.8e9, Events: evs, Rank: &rank}); err != nil {
		t.Fatal(err)
	}
}

// TestSubscriberDPRanks: one SUB socket per rank on port+rank; scores are
// the union of the ranks, sequence tracking is per rank.
func TestSubscriberDPRanks(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	pubs := consecutivePubs(t, 2)
	const ep = "10.1.1.4:8000"
	startSub(t, zmqsub.Target{Endpoint: ep, Host: "127.0.0.1", Port: portOf(t, pubs[0].Endpoint()), Ranks: 2}, e)
	for _, p := range pubs {
		if err := p.WaitSubscribers(1, waitTimeout); err != nil {
			t.Fatal(err)
		}
	}
	publishRank(t, pubs[0], 0, storedBlocks(0, 2))
	publishRank(t, pubs[1], 1, storedBlocks(0, 4))
	waitFor(t, "union of ranks", func() bool { return score(e, ep).Blocks == 4 })
	waitFor(t, "both ranks counted", func() bool { return e.inv.Blocks(ep) == 6 })
	e.clk.Advance(time.Hour)
	if ok, reason := e.inv.Trusted(ep); !ok {
		t.Fatalf("Trusted = false, %q", reason)
	}

	// Rank 1 loses messages; rank 0 is unaffected.
	if err := pubs[1].PublishSeq(9, kvfake.Batch{Events: []any{}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rank 1 gap", func() bool { _, r := e.inv.Trusted(ep); return r == kvexact.ReasonSeqGap })
	if got := score(e, ep).Blocks; got != 2 {
		t.Errorf("score after rank 1 was cleared = %d, want rank 0's 2", got)
	}
	if got := gauge(t, e.m.SeqGaps.WithLabelValues("rule-a", ep, "1")); got != 1 {
		t.Errorf("rank 1 gaps = %v, want 1", got)
	}
}

// TestSubscriberReplayUnavailable: a configured replay port nobody listens
// on costs one bounded replay attempt per connect, then live events flow.
func TestSubscriberReplayUnavailable(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	pub := startPub(t, kvfake.DefaultOptions())
	dead, err := kvfake.Start(kvfake.DefaultOptions()) // reserve a port, then free it
	if err != nil {
		t.Fatal(err)
	}
	deadPort := portOf(t, dead.Endpoint())
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	const ep = "10.1.1.5:8000"
	o := subOpts(e)
	o.ReplayTimeout = 200 * time.Millisecond
	s, err := zmqsub.Start(zmqsub.Target{Endpoint: ep, Host: "127.0.0.1", Port: portOf(t, pub.Endpoint()), ReplayPort: deadPort}, e.inv, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := pub.WaitSubscribers(1, waitTimeout); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replay attempt failed", func() bool { return gauge(t, e.m.Replays.WithLabelValues("rule-a", ep, "error")) == 1 })
	mustPublish(t, pub, storedBlocks(0, 3))
	waitFor(t, "live events after failed replay", func() bool { return score(e, ep).Blocks == 3 })
	if ok, r := e.inv.Trusted(ep); ok || r != kvexact.ReasonWarmup {
		t.Errorf("Trusted = %v, %q; want warm-up (no rebuild happened)", ok, r)
	}
}

// TestSubscriberPartialReplay: when the engine's replay buffer no longer
// starts at seq 0, the replayed batches are applied but the inventory is
// not a full rebuild, so it still has to warm up.
func TestSubscriberPartialReplay(t *testing.T) {
	checkNoLeak(t)
	e := newEnv(t)
	o := kvfake.DefaultOptions()
	o.ReplayAddr = "tcp://127.0.0.1:*"
	pub := startPub(t, o)
	mustPublish(t, pub, storedBlocks(0, 2))
	mustPublish(t, pub, storedBlocks(2, 3))
	mustPublish(t, pub, storedBlocks(0, 1)) // seq 2: re-announces block 0
	pub.ForgetReplay(2)                     // buffer rolled over: only seq 2 is left
	const ep = "10.1.1.6:8000"
	startSub(t, zmqsub.Target{Endpoint: ep, Host: "127.0.0.1", Port: portOf(t, pub.Endpoint()),
		ReplayPort: portOf(t, pub.ReplayEndpoint())}, e)
	waitFor(t, "partial replay", func() bool { return gauge(t, e.m.Replays.WithLabelValues("rule-a", ep, "partial")) == 1 })
	if got := score(e, ep).Blocks; got != 1 {
		t.Errorf("score = %d, want the 1 block of the replayed batch", got)
	}
	if ok, r := e.inv.Trusted(ep); ok || r != kvexact.ReasonWarmup {
		t.Errorf("Trusted = %v, %q; want warm-up (not a full rebuild)", ok, r)
	}
	if next, ok := e.inv.NextSeq(ep, 0); !ok || next != 3 {
		t.Errorf("NextSeq = %d, %v; want 3", next, ok)
	}
}
