package datapath

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/zmqsub"
	"github.com/infergate/infergate/spec"
)

// kvSinks stands in for the ZMQ subscribers of a runtime's KV plane: it
// keeps each endpoint's event sink so a test feeds the inventory itself.
type kvSinks struct {
	mu    sync.Mutex
	sinks map[string]zmqsub.Sink
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

func (k *kvSinks) start(tg zmqsub.Target, s zmqsub.Sink, _ zmqsub.Options) (io.Closer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sinks[tg.Endpoint] = s
	return nopCloser{}, nil
}

func (k *kvSinks) sink(t *testing.T, endpoint string) zmqsub.Sink {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.sinks[endpoint]
	if s == nil {
		t.Fatalf("no KV event source started for %s", endpoint)
	}
	return s
}

// installConnected installs r and marks each endpoint's event feed
// connected, as a subscriber that reached its engine would.
func (k *kvSinks) installConnected(t *testing.T, rt *Runtime, r *spec.Rule) {
	t.Helper()
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	for _, ep := range r.Endpoints {
		if err := k.sink(t, ep.ID).SetConnected(ep.ID, 0, true); err != nil {
			t.Fatal(err)
		}
	}
}

// idsPrompt is a completion body whose prompt is token ids (KV-exact keys
// them without a /tokenize round trip).
func idsPrompt(ids []uint32) string {
	var b strings.Builder
	b.WriteString(`{"model":"fake-model","max_tokens":3,"prompt":[`)
	for k, id := range ids {
		if k > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(id), 10))
	}
	b.WriteString(`]}`)
	return b.String()
}

func tokenRun(from uint32, n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = from + uint32(i)
	}
	return ids
}

// TestAccessLogKVExactTier: on a kvExactMode-3 single pool the access
// line's tier names the picker that chose: the KV-exact tier when it sent
// the request to the engine holding the prompt, the rule's sel mode when
// the tier missed and the mode chose, and the cost model's load rung when
// it placed a least-connections rule's miss. A prompt the cost model just
// placed is pending on its engine (kvexact.Pending), so its repeats,
// sent before any event, follow it through the KV-exact tier; a prompt the
// sel mode placed is not.
func TestAccessLogKVExactTier(t *testing.T) {
	held := tokenRun(0, 32) // two blocks of 16, cached on the second engine
	fresh := func(i int) []uint32 { return tokenRun(uint32(5000+100*i), 32) }
	same := func(int) []uint32 { return tokenRun(5000, 32) }
	tests := []struct {
		name     string
		sel      spec.Selector
		prompt   func(i int) []uint32 // request i's prompt
		wantTier string
		thenTier string // requests after the first ("": wantTier)
		holder   bool   // every request must reach the holder
		oneEP    bool   // every request must reach the first one's engine
	}{
		{"KV-exact picks", spec.SelRoundRobin, func(int) []uint32 { return held }, ladder.TierKVExact, "", true, false},
		// The mode's own choice is no KV-exact placement, so nothing is
		// noted and a repeat misses again.
		{"miss falls back to the sel mode, repeats too", spec.SelRoundRobin, same, "rr", "", false, false},
		{"lc miss placed by the cost model", spec.SelLeastConn, fresh, ladder.TierLoad, "", false, false},
		{"a placed prompt's repeats follow it", spec.SelLeastConn, same, ladder.TierLoad, ladder.TierKVExact, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions()
			ks := &kvSinks{sinks: map[string]zmqsub.Sink{}}
			o.KV.StartSub = ks.start
			rt, logs := jsonLogRuntime(t, o)
			e1, e2 := startEngine(t, "k1"), startEngine(t, "k2")
			r := newRule("127.0.0.1", freePort(t), tt.sel, epFor(t, e1.Addr(), 1), epFor(t, e2.Addr(), 1))
			r.Engine = spec.EngineVLLM
			r.KV = &spec.KV{Mode: 3, ZMQPort: freePort(t), BlockSize: 16, DPRanks: 1, Warmup: time.Millisecond}
			ks.installConnected(t, rt, r)
			holder := r.Endpoints[1].ID
			ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: 16, TokenIDs: held, BlockHashes: []uint64{11, 12}}
			ks.sink(t, holder).Apply(holder, 0, 1, kvexact.Batch{Events: []kvexact.Event{ev}})
			waitFor(t, 5*time.Second, "a trusted inventory", func() bool {
				for _, row := range rt.KVPlane().KVInventory() {
					if !row.Trusted {
						return false
					}
				}
				return true
			})

			const n = 4
			first := ""
			for i := range n {
				res := post(t, testClient(), ruleURL(r)+pathCompletions, idsPrompt(tt.prompt(i)))
				if res.status != http.StatusOK {
					t.Fatalf("request %d: %d %s", i, res.status, res.body)
				}
				got := res.header.Get(fakeengine.HeaderEngine)
				if tt.holder && got != "k2" {
					t.Fatalf("request %d served by %s, want the holder k2", i, got)
				}
				if first == "" {
					first = got
				}
				if tt.oneEP && got != first {
					t.Fatalf("request %d served by %s, want %s, where the first one went", i, got, first)
				}
			}
			lines := logs.waitAccessLines(t, n)
			if len(lines) != n {
				t.Fatalf("%d access lines, want %d:\n%s", len(lines), n, logs.String())
			}
			for i, l := range lines {
				want := tt.wantTier
				if i > 0 && tt.thenTier != "" {
					want = tt.thenTier
				}
				if l["tier"] != want {
					t.Errorf("access line %d tier %v (endpoint %v), want %s", i, l["tier"], l["endpoint"], want)
				}
			}
		})
	}
}
