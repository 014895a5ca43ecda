package kvplane

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/trtpoll"
	"github.com/infergate/infergate/kvexact/zmqsub"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// recorder is an injected starter: it records every source started and
// closed instead of opening sockets.
type recorder struct {
	mu      sync.Mutex
	started []string
	closed  []string
	binds   int
	sinks   map[string]zmqsub.Sink
}

type closer struct {
	r  *recorder
	id string
}

func (c closer) Close() error {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	c.r.closed = append(c.r.closed, c.id)
	return nil
}

func (r *recorder) opts() Options {
	o := DefaultOptions()
	r.sinks = map[string]zmqsub.Sink{}
	o.StartSub = func(t zmqsub.Target, s zmqsub.Sink, _ zmqsub.Options) (io.Closer, error) {
		id := fmt.Sprintf("zmq %s %s:%d ranks=%d replay=%d", t.Endpoint, t.Host, t.Port, t.Ranks, t.ReplayPort)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.started = append(r.started, id)
		r.sinks[t.Endpoint] = s
		return closer{r, id}, nil
	}
	o.StartTRT = func(t trtpoll.Target, _ trtpoll.Sink, _ trtpoll.Options) (io.Closer, error) {
		id := "trt " + t.Endpoint + " " + t.URL
		r.mu.Lock()
		defer r.mu.Unlock()
		r.started = append(r.started, id)
		return closer{r, id}, nil
	}
	o.StartBind = func(t zmqsub.BindTarget, s zmqsub.Sink, _ zmqsub.Options) (io.Closer, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.binds++
		r.sinks["bind"] = s
		return closer{r, "bind " + t.Addr}, nil
	}
	return o
}

// take returns and resets what was started and closed since the last call.
func (r *recorder) take() (started, closed []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	started, closed = r.started, r.closed
	r.started, r.closed = nil, nil
	sort.Strings(started)
	sort.Strings(closed)
	return started, closed
}

func ep(ip string, role spec.Role) spec.Endpoint {
	a := netip.MustParseAddrPort(ip + ":8000")
	return spec.Endpoint{ID: a.String(), Addr: a, Weight: 1, Role: role}
}

func pdRule(kv spec.KV, eps ...spec.Endpoint) *spec.Rule {
	return &spec.Rule{
		Key:       spec.Key{VIP: netip.MustParseAddr("10.0.0.100"), Port: 80, Protocol: "tcp"},
		Name:      "r1",
		Engine:    spec.EngineVLLM,
		PD:        &spec.PD{BalanceAbsThreshold: 3},
		KV:        &kv,
		Endpoints: eps,
	}
}

var (
	p1 = ep("10.0.0.1", spec.RolePrefill)
	p2 = ep("10.0.0.2", spec.RolePrefill)
	p3 = ep("10.0.0.3", spec.RolePrefill)
	d1 = ep("10.0.0.9", spec.RoleDecode)
)

func TestInstallDiffsSubscribers(t *testing.T) {
	mode1 := spec.KV{Mode: 1, ZMQPort: 6000, DPRanks: 2}
	type step struct {
		name        string
		next        *spec.Rule
		wantStarted []string
		wantClosed  []string
		wantNil     bool
	}
	steps := []step{
		{"create: prefills only, every rank", pdRule(mode1, p1, p2, d1),
			[]string{"zmq 10.0.0.1:8000 10.0.0.1:6000 ranks=2 replay=0", "zmq 10.0.0.2:8000 10.0.0.2:6000 ranks=2 replay=0"}, nil, false},
		{"same endpoints: nothing moves", pdRule(mode1, p1, p2, d1), nil, nil, false},
		{"swap p2 for p3: p1 kept", pdRule(mode1, p1, p3, d1),
			[]string{"zmq 10.0.0.3:8000 10.0.0.3:6000 ranks=2 replay=0"}, []string{"zmq 10.0.0.2:8000 10.0.0.2:6000 ranks=2 replay=0"}, false},
		{"KV settings change: rebuild", pdRule(spec.KV{Mode: 1, ZMQPort: 6000, DPRanks: 1}, p1, p3, d1),
			[]string{"zmq 10.0.0.1:8000 10.0.0.1:6000 ranks=1 replay=0", "zmq 10.0.0.3:8000 10.0.0.3:6000 ranks=1 replay=0"},
			[]string{"zmq 10.0.0.1:8000 10.0.0.1:6000 ranks=2 replay=0", "zmq 10.0.0.3:8000 10.0.0.3:6000 ranks=2 replay=0"}, false},
		{"mode 3: every endpoint of the pool", pdRule(spec.KV{Mode: 3, ZMQPort: 6000, DPRanks: 1}, p1, d1),
			[]string{"zmq 10.0.0.9:8000 10.0.0.9:6000 ranks=1 replay=0", "zmq 10.0.0.1:8000 10.0.0.1:6000 ranks=1 replay=0"},
			[]string{"zmq 10.0.0.1:8000 10.0.0.1:6000 ranks=1 replay=0", "zmq 10.0.0.3:8000 10.0.0.3:6000 ranks=1 replay=0"}, false},
		{"KV off: everything closed", &spec.Rule{Key: pdRule(mode1).Key, Name: "r1", Endpoints: []spec.Endpoint{p1}}, nil,
			[]string{"zmq 10.0.0.1:8000 10.0.0.1:6000 ranks=1 replay=0", "zmq 10.0.0.9:8000 10.0.0.9:6000 ranks=1 replay=0"}, true},
	}
	rec := &recorder{}
	p := New(rec.opts(), nil, nil)
	defer p.Close()
	var prev *spec.Rule
	var invs []*kvexact.Inventory
	for _, s := range steps {
		rk, err := p.Install(prev, s.next)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if (rk == nil) != s.wantNil {
			t.Fatalf("%s: RuleKV = %v, want nil %v", s.name, rk, s.wantNil)
		}
		started, closed := rec.take()
		sort.Strings(s.wantStarted)
		sort.Strings(s.wantClosed)
		if fmt.Sprint(started) != fmt.Sprint(s.wantStarted) || fmt.Sprint(closed) != fmt.Sprint(s.wantClosed) {
			t.Fatalf("%s:\nstarted %q\nwant    %q\nclosed  %q\nwant    %q", s.name, started, s.wantStarted, closed, s.wantClosed)
		}
		if rk != nil {
			invs = append(invs, rk.Inventory())
		}
		prev = s.next
	}
	if invs[0] != invs[1] || invs[1] != invs[2] {
		t.Fatal("an endpoint-only update replaced the inventory")
	}
	if invs[2] == invs[3] {
		t.Fatal("a KV settings change kept the inventory")
	}
}

func TestInstallReplayAndTRT(t *testing.T) {
	rec := &recorder{}
	o := rec.opts()
	o.ReplayPortOffset = 1000
	p := New(o, nil, nil)
	defer p.Close()
	if _, err := p.Install(nil, pdRule(spec.KV{Mode: 1}, p1, d1)); err != nil {
		t.Fatal(err)
	}
	trt := pdRule(spec.KV{Mode: 1}, p2, d1)
	trt.Key.Port, trt.Name, trt.Engine = 81, "trt", spec.EngineTRTLLM
	if _, err := p.Install(nil, trt); err != nil {
		t.Fatal(err)
	}
	started, _ := rec.take()
	want := []string{"trt 10.0.0.2:8000 http://10.0.0.2:8000", "zmq 10.0.0.1:8000 10.0.0.1:5557 ranks=1 replay=6557"}
	if fmt.Sprint(started) != fmt.Sprint(want) {
		t.Fatalf("started %q, want %q", started, want)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, closed := rec.take(); len(closed) != 2 {
		t.Fatalf("Close closed %q", closed)
	}
}

func TestBindTopologyDispatches(t *testing.T) {
	rec := &recorder{}
	o := rec.opts()
	o.BindAddr = "tcp://127.0.0.1:0"
	p := New(o, nil, nil)
	defer p.Close()
	a, err := p.Install(nil, pdRule(spec.KV{Mode: 1}, p1, p2, d1))
	if err != nil {
		t.Fatal(err)
	}
	r2 := pdRule(spec.KV{Mode: 3}, p1)
	r2.Key.Port, r2.Name = 81, "r2"
	b, err := p.Install(nil, r2)
	if err != nil {
		t.Fatal(err)
	}
	if started, _ := rec.take(); len(started) != 0 || rec.binds != 1 {
		t.Fatalf("bind topology dialled %q, bound %d sockets", started, rec.binds)
	}
	bind := rec.sinks["bind"]
	ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: make([]uint32, 16), BlockHashes: []uint64{1}}
	bind.Apply(p1.ID, 0, 0, kvexact.Batch{Events: []kvexact.Event{ev}})
	if a.Inventory().Blocks(p1.ID) != 1 || b.Inventory().Blocks(p1.ID) != 1 {
		t.Fatal("a shared endpoint's events must reach every rule indexing it")
	}
	allowed := p.bindAllowed
	if !allowed(p2.ID) || allowed(d1.ID) || allowed("10.9.9.9:1") {
		t.Fatal("bind admits exactly the eligible endpoints")
	}
	p.Remove(a)
	if allowed(p2.ID) || !allowed(p1.ID) {
		t.Fatal("removing a rule must unbind only its endpoints")
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestInventoryRowsAndPickSingle(t *testing.T) {
	rec := &recorder{}
	o := rec.opts()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	o.Clock = clk
	reg := prometheus.NewRegistry()
	p := New(o, metrics.NewKV(reg), nil)
	defer p.Close()
	rule := pdRule(spec.KV{Mode: 3, Warmup: 5 * time.Second}, p1, p2)
	rk, err := p.Install(nil, rule)
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, 32)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	s := rec.sinks[p1.ID]
	if err := s.SetConnected(p1.ID, 0, true); err != nil {
		t.Fatal(err)
	}
	ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: tokens, BlockHashes: []uint64{11, 12}}
	s.Apply(p1.ID, 0, 7, kvexact.Batch{Events: []kvexact.Event{ev}})

	cands := []ladder.Candidate{{ID: p1.ID}, {ID: p2.ID, Index: 1}}
	f := &ladder.Facts{Tokens: tokens}
	if _, _, reason, ok := rk.PickSingle(f, cands); ok || reason != ladder.ReasonUntrusted {
		t.Fatalf("during warm-up: ok %v reason %q, want untrusted", ok, reason)
	}
	rows := p.KVInventory()
	if len(rows) != 2 || rows[0].Endpoint != p1.ID || rows[0].Blocks != 2 || rows[0].Trusted || rows[0].Reason != kvexact.ReasonWarmup ||
		rows[0].LastSeq == nil || *rows[0].LastSeq != 7 || rows[0].LastEventAgeSec == nil || rows[1].Reason != ReasonNoEvents {
		t.Fatalf("rows during warm-up: %+v", rows)
	}
	clk.add(6 * time.Second)
	idx, _, reason, ok := rk.PickSingle(f, cands)
	if !ok || idx != 0 {
		t.Fatalf("after warm-up: %d %q %v, want p1", idx, reason, ok)
	}
	if rows := p.KVInventory(); !rows[0].Trusted || rows[0].Reason != "" {
		t.Fatalf("rows after warm-up: %+v", rows)
	}
	// An engine restart (sequence regression, first batches lost) clears
	// and untrusts p1.
	s.Apply(p1.ID, 0, 3, kvexact.Batch{})
	if _, _, reason, ok := rk.PickSingle(f, cands); ok || reason != ladder.ReasonUntrusted {
		t.Fatalf("after restart: ok %v reason %q", ok, reason)
	}
	if rows := p.KVInventory(); rows[0].Blocks != 0 || rows[0].Reason != kvexact.ReasonRestart {
		t.Fatalf("rows after restart: %+v", rows[0])
	}
}

// TestZeroHitWatchdog: lookups that never hit while events flow fire the
// watchdog once per streak; without recent events they do not count.
func TestZeroHitWatchdog(t *testing.T) {
	rec := &recorder{}
	o := rec.opts()
	clk := &fakeClock{now: time.Unix(1000, 0)}
	o.Clock, o.WatchdogN, o.WatchdogWindow = clk, 3, time.Minute
	m := metrics.NewKV(prometheus.NewRegistry())
	p := New(o, m, nil)
	defer p.Close()
	rk, err := p.Install(nil, pdRule(spec.KV{Mode: 3, Warmup: time.Second}, p1))
	if err != nil {
		t.Fatal(err)
	}
	s := rec.sinks[p1.ID]
	if err := s.SetConnected(p1.ID, 0, true); err != nil {
		t.Fatal(err)
	}
	clk.add(2 * time.Second) // past warm-up: trusted
	cands := []ladder.Candidate{{ID: p1.ID}}
	other := &ladder.Facts{Tokens: make([]uint32, 16)} // never stored
	fired := func() float64 { return cval(m.Routing.ZeroHitWatchdog.WithLabelValues("r1")) }
	for i := 0; i < 5; i++ {
		rk.PickSingle(other, cands)
	}
	if fired() != 0 {
		t.Fatal("the watchdog fired without any event flowing")
	}
	tokens := make([]uint32, 16)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: tokens, BlockHashes: []uint64{1}}
	s.Apply(p1.ID, 0, 0, kvexact.Batch{Events: []kvexact.Event{ev}})
	for i := 0; i < 7; i++ {
		rk.PickSingle(other, cands)
	}
	if fired() != 1 {
		t.Fatalf("watchdog fired %v times for 7 zero-hit lookups with N=3, want once per streak", fired())
	}
	if _, _, _, ok := rk.PickSingle(&ladder.Facts{Tokens: tokens}, cands); !ok {
		t.Fatal("the stored prompt must hit")
	}
	for i := 0; i < 3; i++ {
		rk.PickSingle(other, cands)
	}
	if fired() != 2 {
		t.Fatalf("watchdog = %v after a hit re-armed it, want 2", fired())
	}
	if v := cval(m.Routing.Tier15Misses.WithLabelValues("r1", ladder.ReasonMiss)); v != 15 {
		t.Fatalf("misses{miss} = %v, want 15", v)
	}
}

func cval(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestInventoryRowsBlockSize: the rows show the block size the inventory
// keys with, so a rule whose kvBlockSize differs from what the engines
// publish is visible (validate warns on it).
func TestInventoryRowsBlockSize(t *testing.T) {
	tests := []struct {
		name       string
		configured int
		event      int // 0: no event
		want       int
	}{
		{"configured before any event", 32, 0, 32},
		{"learned equal", 16, 16, 16},
		{"learned differs from kvBlockSize", 32, 16, 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			p := New(rec.opts(), metrics.NewKV(prometheus.NewRegistry()), nil)
			defer p.Close()
			if _, err := p.Install(nil, pdRule(spec.KV{Mode: 3, BlockSize: tt.configured}, p1)); err != nil {
				t.Fatal(err)
			}
			if tt.event > 0 {
				ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: tt.event, TokenIDs: make([]uint32, tt.event), BlockHashes: []uint64{1}}
				rec.sinks[p1.ID].Apply(p1.ID, 0, 0, kvexact.Batch{Events: []kvexact.Event{ev}})
			}
			rows := p.KVInventory()
			if len(rows) != 1 || rows[0].BlockSize != tt.want {
				t.Fatalf("rows %+v, want one with block_size %d", rows, tt.want)
			}
		})
	}
}

// TestPendingTable: --kv-pending-ttl gives each rule its table (0: the
// default TTL, negative: none), and the table is rule state like the
// inventory: an update that keeps the KV configuration keeps it, one that
// changes it starts a new, empty one.
func TestPendingTable(t *testing.T) {
	tests := []struct {
		name string
		ttl  time.Duration
		want time.Duration // the table's TTL; 0: no table
	}{
		{"the default", kvexact.DefaultPendingTTL, kvexact.DefaultPendingTTL},
		{"zero: the default", 0, kvexact.DefaultPendingTTL},
		{"set", 5 * time.Second, 5 * time.Second},
		{"negative: off", -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			o := rec.opts()
			o.PendingTTL = tt.ttl
			p := New(o, nil, nil)
			defer p.Close()
			r1 := pdRule(spec.KV{Mode: 1}, p1, d1)
			rk, err := p.Install(nil, r1)
			if err != nil {
				t.Fatal(err)
			}
			table := rk.st.pending
			var got time.Duration
			if table != nil {
				got = table.TTL()
			}
			if got != tt.want {
				t.Fatalf("table's TTL %v, want %v (0: no table)", got, tt.want)
			}
			if table == nil {
				return
			}
			r2 := pdRule(spec.KV{Mode: 1}, p1, p2, d1) // an endpoint more
			if rk, err = p.Install(r1, r2); err != nil {
				t.Fatal(err)
			}
			if rk.st.pending != table {
				t.Errorf("an update keeping the KV configuration replaced the table")
			}
			r3 := pdRule(spec.KV{Mode: 1, BlockSize: 32}, p1, p2, d1)
			if rk, err = p.Install(r2, r3); err != nil {
				t.Fatal(err)
			}
			if rk.st.pending == table || rk.st.pending == nil {
				t.Errorf("an update changing the block size kept the old table (or none)")
			}
		})
	}
}
