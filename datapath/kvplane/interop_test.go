package kvplane

// KV-exact against publishers we did not write. Every test runs
// real libzmq sockets on loopback through the real subscribers, in the
// bind topology (engines dial the gateway's bound SUB socket, topic
// kv@<ip[:port]>@<model>) and, where it applies, the dial topology (the
// gateway dials each engine's PUB socket).

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/internal/kvfake"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/zmqsub"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

const ioTimeout = 10 * time.Second

// ioEnv is a plane wired to real sockets with a fake trust clock.
type ioEnv struct {
	t     *testing.T
	bind  bool
	plane *Plane
	clk   *kvfake.Clock
	m     *metrics.KV
	addr  string // bound SUB address (bind topology)
	port  int    // engines' PUB port (dial topology)
}

var topologies = []struct {
	name string
	bind bool
}{{"bind", true}, {"dial", false}}

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.ErrorLevel)
	return l
}

func newIOEnv(t *testing.T, bind bool) *ioEnv {
	t.Helper()
	e := &ioEnv{t: t, bind: bind, clk: kvfake.NewClock(time.Unix(1_800_000_000, 0)), m: metrics.NewKV(prometheus.NewRegistry())}
	o := DefaultOptions()
	o.Clock = e.clk
	o.StaleAfter = 30 * time.Second
	o.Subscriber.PollInterval = 10 * time.Millisecond
	o.Subscriber.ReconnectIvl = 20 * time.Millisecond
	o.Subscriber.ReconnectIvlMax = 100 * time.Millisecond
	var mu sync.Mutex
	if bind {
		o.BindAddr = "tcp://127.0.0.1:*"
		o.StartBind = func(bt zmqsub.BindTarget, s zmqsub.Sink, so zmqsub.Options) (io.Closer, error) {
			sub, addr, err := zmqsub.StartBind(bt, s, so)
			mu.Lock()
			e.addr = addr
			mu.Unlock()
			return sub, err
		}
	}
	if !bind {
		// One PUB port for every engine (kvZmqPort), each on its own
		// loopback IP.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		e.port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	e.plane = New(o, e.m, quietLog())
	t.Cleanup(func() {
		if err := e.plane.Close(); err != nil {
			t.Errorf("plane close: %v", err)
		}
	})
	return e
}

// endpoint is an engine of the test fleet: its HTTP address (never
// dialled here) is ip:8000; it publishes on ip:port (dial) or dials the
// bound socket with topic (bind).
func endpoint(ip string, port int) spec.Endpoint {
	a := netip.MustParseAddrPort(ip + ":" + strconv.Itoa(port))
	return spec.Endpoint{ID: a.String(), Addr: a, Weight: 1}
}

func (e *ioEnv) rule(name string, warmup time.Duration, eps ...spec.Endpoint) *spec.Rule {
	return &spec.Rule{
		Key:       spec.Key{VIP: netip.MustParseAddr("10.0.0.100"), Port: 80, Protocol: "tcp"},
		Name:      name,
		Engine:    spec.EngineVLLM,
		KV:        &spec.KV{Mode: 3, BlockSize: 16, Warmup: warmup, ZMQPort: uint16(e.port)},
		Endpoints: eps,
	}
}

func (e *ioEnv) install(prev, next *spec.Rule) *RuleKV {
	e.t.Helper()
	rk, err := e.plane.Install(prev, next)
	if err != nil {
		e.t.Fatal(err)
	}
	return rk
}

// engine starts a fake engine publisher for ep. In the bind topology the
// plane must already be bound (install a rule first) and topic is used as
// given ("" → kv@<ep.ID>@m); in the dial topology it binds ep's IP on the
// env's port.
func (e *ioEnv) engine(ep spec.Endpoint, topic string, enc kvfake.Encoding) *kvfake.Publisher {
	e.t.Helper()
	o := kvfake.DefaultOptions()
	o.Encoding = enc
	if e.bind {
		if topic == "" {
			topic = "kv@" + ep.ID + "@m"
		}
		o.ConnectAddr, o.Topic = e.addr, topic
	} else {
		o.PubAddr = "tcp://" + ep.Addr.Addr().String() + ":" + strconv.Itoa(e.port)
	}
	p, err := kvfake.Start(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func closePub(t *testing.T, p *kvfake.Publisher) {
	t.Helper()
	if err := p.Close(); err != nil {
		t.Errorf("publisher close: %v", err)
	}
}

// ioTokens is a 4-block prompt (block size 16).
var ioTokens = func() []uint32 {
	out := make([]uint32, 64)
	for i := range out {
		out[i] = uint32(9000 + 13*i)
	}
	return out
}()

// blocks is a BlockStored of blocks [from, to) of ioTokens; hashes are
// 0xe000…+block; a first block > 0 names its parent.
func blocks(from, to int) kvfake.BlockStored {
	ev := kvfake.BlockStored{BlockSize: 16, TokenIDs: ioTokens[from*16 : to*16]}
	for b := from; b < to; b++ {
		ev.BlockHashes = append(ev.BlockHashes, 0xe000000000000000+uint64(b))
	}
	if from > 0 {
		p := 0xe000000000000000 + uint64(from-1)
		ev.Parent = &p
	}
	return ev
}

func batch(evs ...any) kvfake.Batch { return kvfake.Batch{TS: 1, Events: evs} }

// flow publishes ev every 10 ms from seq first until stop is closed:
// an engine whose events keep flowing while the gateway changes.
func flow(t *testing.T, p *kvfake.Publisher, first uint64, ev any) (stop func()) {
	t.Helper()
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for seq := first; ; seq++ {
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if err := p.PublishSeq(seq, batch(ev)); err != nil {
				t.Errorf("publish: %v", err)
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

func (e *ioEnv) row(ep string) InventoryRow {
	for _, r := range e.plane.KVInventory() {
		if r.Endpoint == ep {
			return r
		}
	}
	e.t.Fatalf("no inventory row for %s in %+v", ep, e.plane.KVInventory())
	return InventoryRow{}
}

func (e *ioEnv) held(rk *RuleKV, ep string) int {
	return rk.Inventory().ScoreTokens(ioTokens, []string{ep})[0].Blocks
}

// TestLateRuleUnderFlowingEvents is fault 1: a KV rule created after its
// engine started publishing, and then updated (kvWarmupSec changed, so the
// inventory is rebuilt) while events keep flowing, becomes trusted after
// warm-up each time — before the fix the bind topology left the rebuilt
// inventory disconnected until the gateway restarted.
func TestLateRuleUnderFlowingEvents(t *testing.T) {
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			e := newIOEnv(t, tp.bind)
			ep := endpoint("127.0.0.1", 8000)
			if tp.bind {
				// Bind first: a placeholder KV rule on another VIP.
				other := e.rule("other", time.Second, endpoint("127.0.0.9", 8000))
				other.Key.Port = 81
				e.install(nil, other)
			}
			pub := e.engine(ep, "", kvfake.Encoding{MapEvents: true})
			defer closePub(t, pub)
			stop := flow(t, pub, 1, blocks(0, 4))
			defer stop()
			time.Sleep(50 * time.Millisecond) // events flow before the rule exists

			r1 := e.rule("late", 5*time.Second, ep)
			rk := e.install(nil, r1)
			waitUntil(t, "blocks of the late rule", func() bool { return e.held(rk, ep.ID) == 4 })
			e.clk.Advance(6 * time.Second)
			if ok, why := rk.Inventory().Trusted(ep.ID); !ok {
				t.Fatalf("late rule after warm-up: untrusted (%s)", why)
			}

			r2 := e.rule("late", 7*time.Second, ep) // kvWarmupSec changed: inventory rebuilt
			rk2 := e.install(r1, r2)
			if rk2.Inventory() == rk.Inventory() {
				t.Fatal("a changed kvWarmupSec must rebuild the inventory")
			}
			waitUntil(t, "blocks of the rebuilt inventory", func() bool { return e.held(rk2, ep.ID) == 4 })
			e.clk.Advance(8 * time.Second)
			waitUntil(t, "rebuilt inventory connected", func() bool { return e.row(ep.ID).Connected })
			if ok, why := rk2.Inventory().Trusted(ep.ID); !ok {
				t.Fatalf("rebuilt inventory after warm-up: untrusted (%s), row %+v", why, e.row(ep.ID))
			}
		})
	}
}

// TestEngineKilledAndRestarted is fault 2: an endpoint whose health goes
// down loses its blocks at once (nothing else says so in the bind
// topology), the restarted engine's stream from seq 1 is the restart it
// is (cleared, counted, complete: trusted without warm-up), and in the
// bind topology "connected" means an event arrived within the live window.
func TestEngineKilledAndRestarted(t *testing.T) {
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			e := newIOEnv(t, tp.bind)
			ep := endpoint("127.0.0.1", 8000)
			r := e.rule("r", 5*time.Second, ep)
			rk := e.install(nil, r)
			pub := e.engine(ep, "", kvfake.Encoding{})
			if err := pub.WaitSubscribers(1, ioTimeout); err != nil {
				t.Fatal(err)
			}
			for seq := uint64(1); seq <= 5; seq++ {
				if err := pub.PublishSeq(seq, batch(blocks(0, 4))); err != nil {
					t.Fatal(err)
				}
			}
			waitUntil(t, "4 blocks", func() bool { return e.held(rk, ep.ID) == 4 })
			// Every batch applied before the kill: a batch still queued would
			// re-add the blocks after health down cleared them.
			waitUntil(t, "batch 5 applied", func() bool {
				for _, st := range rk.Inventory().Ranks() {
					if st.Endpoint == ep.ID && st.HasSeq && st.LastSeq == 5 {
						return true
					}
				}
				return false
			})
			e.clk.Advance(6 * time.Second)
			if ok, why := rk.Inventory().Trusted(ep.ID); !ok {
				t.Fatalf("before the kill: untrusted (%s)", why)
			}
			closePub(t, pub) // engine killed; the probe notices
			rk.EndpointDown(ep.ID)
			if n := e.held(rk, ep.ID); n != 0 {
				t.Fatalf("health down left %d blocks", n)
			}
			// Dialled, the socket monitor may report the disconnect first.
			if ok, why := rk.Inventory().Trusted(ep.ID); ok || (why != kvexact.ReasonHealthDown && (tp.bind || why != kvexact.ReasonDisconnected)) {
				t.Fatalf("health down: trusted=%v reason %q, want %q", ok, why, kvexact.ReasonHealthDown)
			}
			if tp.bind {
				if row := e.row(ep.ID); row.Connected || row.Reason != kvexact.ReasonHealthDown {
					t.Fatalf("bind row after health down: %+v", row)
				}
			}

			pub2 := e.engine(ep, "", kvfake.Encoding{}) // restarted: seq from 1
			defer closePub(t, pub2)
			if err := pub2.WaitSubscribers(1, ioTimeout); err != nil {
				t.Fatal(err)
			}
			if err := pub2.PublishSeq(1, batch(blocks(0, 2))); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the restarted engine's blocks", func() bool { return e.held(rk, ep.ID) == 2 })
			if ok, why := rk.Inventory().Trusted(ep.ID); !ok {
				t.Fatalf("restarted engine seen from seq 1: untrusted (%s)", why)
			}
			if got := testMetric(t, e.m.Restarts.WithLabelValues("r", ep.ID, "0")); got != 1 {
				t.Errorf("restarts = %v, want 1", got)
			}
			if tp.bind {
				if row := e.row(ep.ID); !row.Connected {
					t.Fatalf("bind row right after an event: %+v", row)
				}
				e.clk.Advance(kvexact.DefaultLiveWindow + time.Second)
				row := e.row(ep.ID)
				if row.Connected {
					t.Errorf("bind row connected with no event for longer than the live window: %+v", row)
				}
				if !row.Trusted {
					t.Errorf("a quiet engine (serving hits) must stay trusted: %+v", row)
				}
			}
		})
	}
}

func testMetric(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	return cval(c)
}

// TestHotHolderServingOnlyHits is fault 3: an engine that serves only full
// prefix hits publishes nothing and must stay trusted past
// --kv-stale-after; a miss sent to it (which should publish BlockStored)
// still arms the stale-feed guard.
func TestHotHolderServingOnlyHits(t *testing.T) {
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			e := newIOEnv(t, tp.bind)
			hot, cold := endpoint("127.0.0.1", 8000), endpoint("127.0.0.2", 8000)
			rk := e.install(nil, e.rule("r", time.Second, hot, cold))
			var pubs []*kvfake.Publisher
			for _, ep := range []spec.Endpoint{hot, cold} {
				p := e.engine(ep, "", kvfake.Encoding{MapEvents: true})
				defer closePub(t, p)
				if err := p.WaitSubscribers(1, ioTimeout); err != nil {
					t.Fatal(err)
				}
				pubs = append(pubs, p)
			}
			if err := pubs[0].PublishSeq(1, batch(blocks(0, 4))); err != nil {
				t.Fatal(err)
			}
			if err := pubs[1].PublishSeq(1, batch(kvfake.AllBlocksCleared{})); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "hot holder indexed", func() bool { return e.held(rk, hot.ID) == 4 })
			waitUntil(t, "cold engine heard", func() bool { return e.row(cold.ID).LastSeq != nil })
			e.clk.Advance(2 * time.Second)
			cands := []ladder.Candidate{{ID: hot.ID}, {ID: cold.ID, Index: 1}}
			pick := func(tokens []uint32) (int, string) {
				f := &ladder.Facts{Tokens: tokens}
				i, _, why, ok := rk.PickSingle(f, cands)
				if !ok {
					return -1, why
				}
				rk.NoteWork(f, cands[i])
				return i, ""
			}
			for round := 0; round < 5; round++ { // repeats for 5 × 10 s > stale-after
				if i, why := pick(ioTokens); i != 0 {
					t.Fatalf("round %d: repeat went to %d (%s), want the hot holder", round, i, why)
				}
				e.clk.Advance(10 * time.Second)
			}
			// A partial hit beyond the cached prefix should make it publish.
			longer := append(append([]uint32(nil), ioTokens...), ioTokens[:16]...)
			if i, why := pick(longer); i != 0 {
				t.Fatalf("partial hit went to %d (%s)", i, why)
			}
			e.clk.Advance(31 * time.Second)
			if ok, why := rk.Inventory().Trusted(hot.ID); ok || why != kvexact.ReasonStale {
				t.Fatalf("work that should have published, none came: trusted=%v %q, want stale", ok, why)
			}
		})
	}
}

// TestPortlessTopics is fault 4 (bind topology only): kv@<ip>@<model> maps
// to the rule's one endpoint with that IP; with two, the messages are
// dropped for that rule with a metric, a warning and an inventory reason.
func TestPortlessTopics(t *testing.T) {
	e := newIOEnv(t, true)
	one := endpoint("127.0.0.3", 8000)
	twinA, twinB := endpoint("127.0.0.4", 8000), endpoint("127.0.0.4", 8001)
	rk := e.install(nil, e.rule("r", time.Second, one, twinA, twinB))
	for _, tc := range []struct {
		topic string
		enc   kvfake.Encoding
	}{
		{"kv@127.0.0.3@Qwen/Qwen3-0.6B", kvfake.Encoding{}},
		{"kv@127.0.0.4@Qwen/Qwen3-0.6B", kvfake.Encoding{MapEvents: true}},
	} {
		p := e.engine(spec.Endpoint{}, tc.topic, tc.enc)
		defer closePub(t, p)
		if err := p.WaitSubscribers(1, ioTimeout); err != nil {
			t.Fatal(err)
		}
		if err := p.PublishSeq(1, batch(blocks(0, 3))); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "port-less topic indexed", func() bool { return e.held(rk, one.ID) == 3 })
	waitUntil(t, "ambiguity counted", func() bool {
		return testMetric(t, e.m.AmbiguousTopics.WithLabelValues("r", "127.0.0.4")) >= 1
	})
	for _, ep := range []spec.Endpoint{twinA, twinB} {
		if n := e.held(rk, ep.ID); n != 0 {
			t.Errorf("%s: %d blocks from an ambiguous topic", ep.ID, n)
		}
		if row := e.row(ep.ID); row.Reason != ReasonAmbiguousTopic {
			t.Errorf("%s: row %+v, want reason %s", ep.ID, row, ReasonAmbiguousTopic)
		}
	}
	if row := e.row(one.ID); row.Reason == ReasonNoEvents || row.LastSeq == nil {
		t.Errorf("port-less endpoint row %+v", row)
	}
}

// TestRootParentZero is fault 5: a publisher that sends parent_block_hash 0
// for a root block (array and map encodings) is indexed and counted; an
// unknown non-zero parent is still unanchored.
func TestRootParentZero(t *testing.T) {
	for _, tp := range topologies {
		for _, enc := range []kvfake.Encoding{{}, {MapEvents: true}, {MapEvents: true, MapOuter: true}} {
			t.Run(fmt.Sprintf("%s/map=%v,outer=%v", tp.name, enc.MapEvents, enc.MapOuter), func(t *testing.T) {
				e := newIOEnv(t, tp.bind)
				ep := endpoint("127.0.0.1", 8000)
				rk := e.install(nil, e.rule("r", time.Second, ep))
				pub := e.engine(ep, "", enc)
				defer closePub(t, pub)
				if err := pub.WaitSubscribers(1, ioTimeout); err != nil {
					t.Fatal(err)
				}
				root := blocks(0, 2)
				zero := uint64(0)
				root.Parent = &zero
				stranger := blocks(3, 4)
				bogus := uint64(0x1234)
				stranger.Parent = &bogus
				if err := pub.PublishSeq(1, batch(root, blocks(2, 3), stranger)); err != nil {
					t.Fatal(err)
				}
				// The batch is applied block by block: the held count reaches 3
				// before the stranger is refused, so wait for both.
				unanchored := func() float64 { return testMetric(t, e.m.SkippedBlocks.WithLabelValues("r", "unanchored")) }
				waitUntil(t, "root via parent 0, stranger refused", func() bool {
					return e.held(rk, ep.ID) == 3 && unanchored() >= 1
				})
				if got := testMetric(t, e.m.RootParentZero.WithLabelValues("r")); got != 1 {
					t.Errorf("root_parent_zero = %v, want 1", got)
				}
				if got := unanchored(); got != 1 {
					t.Errorf("unanchored = %v, want 1 (the unknown non-zero parent)", got)
				}
			})
		}
	}
}
