package trtpoll

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/kvexact"
)

// captureTokens is the 32-token block of the live capture (kv-events.md
// §2.6.5): 7141 then 13440 21619 9477 8287 repeated.
func captureTokens() []uint32 {
	out := []uint32{7141}
	rep := []uint32{13440, 21619, 9477, 8287}
	for len(out) < 32 {
		out = append(out, rep[(len(out)-1)%4])
	}
	return out
}

func tokensJSON(ids []uint32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf(`{"type":"unique_token","token_id":%d,"token_extra_id":0}`, id)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Drains in the capture's format: two chained stores (the second a 4-token
// partial block), idle drains, then a restart: [] and a fresh stream from
// event_id 0 with "created".
func captureDrains() []string {
	toks := captureTokens()
	ev5 := `{"event_id":5,"window_size":32768,"data":{"type":"stored","parent_hash":null,"blocks":[{"type":"stored_block","block_hash":1001022829664365637,"tokens":` +
		tokensJSON(toks) + `,"cache_salt":null,"cache_level":0,"priority":35,"mm_keys":[]}]}}`
	ev6 := `{"event_id":6,"window_size":32768,"data":{"type":"stored","parent_hash":1001022829664365637,"blocks":[{"type":"stored_block","block_hash":12299660472283710215,"tokens":` +
		tokensJSON(toks[:4]) + `,"cache_salt":null,"cache_level":0,"priority":35,"mm_keys":[]}]}}`
	ev7 := `{"event_id":7,"window_size":32768,"data":{"type":"updated","block_hash":1001022829664365637,"cache_level":{"type":"updated","old_value":0,"new_value":0}}}`
	created := `{"event_id":0,"data":{"type":"created","num_blocks_per_cache_level":[13391,0]}}`
	return []string{"[" + ev5 + "," + ev6 + "]", "[" + ev7 + "]", "[]", "[]", "[" + created + "]"}
}

type drainServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	drains []string
	served int
	fail   bool
	info   string // /server_info body; "" → 404 (older engines)
	infos  int    // /server_info requests
}

func newDrainServer(t *testing.T, drains []string) *drainServer {
	d := &drainServer{drains: drains}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == PathServerInfo {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.infos++
			if d.info == "" {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write([]byte(d.info))
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != PathKVCacheEvents {
			http.NotFound(w, r)
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body := "[]" // an idle engine
		if len(d.drains) > 0 {
			body, d.drains = d.drains[0], d.drains[1:]
		}
		d.served++
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *drainServer) servedAtLeast(n int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.served >= n
}

// waitFor polls cond, bounded.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestPollerCapture(t *testing.T) {
	d := newDrainServer(t, captureDrains()[:4])
	inv := kvexact.NewInventory(kvexact.Options{Rule: "r", BlockSize: 32, Warmup: time.Nanosecond})
	p := Start(Target{Endpoint: "ep", URL: d.srv.URL}, inv, Options{Rule: "r", Interval: time.Millisecond, BlockSize: 32})
	defer p.Close()
	waitFor(t, "the four drains and one poll after them", func() bool { return d.servedAtLeast(5) })
	if got := inv.Blocks("ep"); got != 1 {
		t.Fatalf("blocks = %d, want 1 (the partial block is skipped)", got)
	}
	if next, ok := inv.NextSeq("ep", 0); !ok || next != 8 {
		t.Fatalf("next seq = %d %v, want 8 (updated advances the sequence)", next, ok)
	}
	if s := inv.ScoreTokens(captureTokens(), []string{"ep"}); s[0].Blocks != 1 {
		t.Fatalf("score of the captured prompt = %+v", s[0])
	}
	if ok, why := inv.Trusted("ep"); !ok {
		t.Fatalf("not trusted after successful drains: %s", why)
	}
	// The engine restarts: event_id 0 with "created" clears the endpoint.
	d.mu.Lock()
	d.drains = append(d.drains, captureDrains()[4])
	d.mu.Unlock()
	waitFor(t, "restart applied", func() bool { n, _ := inv.NextSeq("ep", 0); return n == 1 })
	if got := inv.Blocks("ep"); got != 0 {
		t.Fatalf("blocks after restart = %d, want 0", got)
	}
	// A failing drain untrusts the endpoint.
	d.mu.Lock()
	d.fail = true
	d.mu.Unlock()
	waitFor(t, "disconnected", func() bool { _, why := inv.Trusted("ep"); return why == kvexact.ReasonDisconnected })
}

func TestConvert(t *testing.T) {
	toks := captureTokens()
	tests := []struct {
		name       string
		env        string
		wantKind   kvexact.EventKind // 0: empty batch
		wantBlocks int
		wantTokens int
		wantParent bool
		wantMedium kvexact.Medium
	}{
		{"stored root", `{"event_id":1,"data":{"type":"stored","parent_hash":null,"blocks":[{"block_hash":5,"tokens":` + tokensJSON(toks) + `,"cache_level":0}]}}`,
			kvexact.EventBlockStored, 1, 32, false, kvexact.MediumGPU},
		{"stored chained, hash above int64", `{"event_id":1,"data":{"type":"stored","parent_hash":12299660472283710215,"blocks":[{"block_hash":12299660472283710215,"tokens":` + tokensJSON(toks) + `}]}}`,
			kvexact.EventBlockStored, 1, 32, true, kvexact.MediumGPU},
		{"secondary cache level is CPU", `{"event_id":1,"data":{"type":"stored","parent_hash":null,"blocks":[{"block_hash":5,"tokens":` + tokensJSON(toks) + `,"cache_level":1}]}}`,
			kvexact.EventBlockStored, 1, 32, false, kvexact.MediumCPU},
		{"partial tail dropped", `{"event_id":1,"data":{"type":"stored","parent_hash":null,"blocks":[{"block_hash":5,"tokens":` + tokensJSON(toks) + `},{"block_hash":6,"tokens":` + tokensJSON(toks[:4]) + `}]}}`,
			kvexact.EventBlockStored, 1, 32, false, kvexact.MediumGPU},
		{"salted block not indexed", `{"event_id":1,"data":{"type":"stored","parent_hash":null,"blocks":[{"block_hash":5,"cache_salt":"s","tokens":` + tokensJSON(toks) + `}]}}`,
			0, 0, 0, false, 0},
		{"removed", `{"event_id":1,"data":{"type":"removed","block_hashes":[5,12299660472283710215]}}`, kvexact.EventBlockRemoved, 2, 0, false, 0},
		{"created clears", `{"event_id":0,"data":{"type":"created","num_blocks_per_cache_level":[13391,0]}}`, kvexact.EventAllBlocksCleared, 0, 0, false, 0},
		{"updated only advances", `{"event_id":1,"data":{"type":"updated","block_hash":5}}`, 0, 0, 0, false, 0},
		{"other window ignored", `{"event_id":1,"window_size":7,"data":{"type":"created"}}`, 0, 0, 0, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Converter{BlockSize: 32}
			var first kvexact.Batch
			c.Convert(&Envelope{EventID: 0, WindowSize: ptr(32768), Data: []byte(`{"type":"updated"}`)}, &first) // pins the window
			envs, err := Decode([]byte("[" + tc.env + "]"))
			if err != nil {
				t.Fatal(err)
			}
			var b kvexact.Batch
			if _, ok := c.Convert(&envs[0], &b); !ok {
				t.Fatal("not converted")
			}
			if tc.wantKind == 0 {
				if len(b.Events) != 0 {
					t.Fatalf("events = %+v, want none", b.Events)
				}
				return
			}
			if len(b.Events) != 1 {
				t.Fatalf("events = %+v", b.Events)
			}
			e := b.Events[0]
			if e.Kind != tc.wantKind || len(e.BlockHashes) != tc.wantBlocks || len(e.TokenIDs) != tc.wantTokens || e.HasParent != tc.wantParent || e.Medium != tc.wantMedium {
				t.Fatalf("event = %+v", e)
			}
		})
	}
}

func ptr(v int) *int { return &v }

func TestDecodeRejectsGarbage(t *testing.T) {
	for _, body := range []string{"", "{", `{"event_id":1}`, "[1]"} {
		if _, err := Decode([]byte(body)); err == nil {
			t.Errorf("Decode(%q) accepted", body)
		}
	}
}

// TestAdmission: an engine reporting another tokens_per_block is never
// drained (draining is destructive) until it agrees; unknown or equal sizes
// are admitted.
func TestAdmission(t *testing.T) {
	tests := []struct {
		name  string
		info  string
		admit bool
	}{
		{"no /server_info (older build)", "", true},
		{"no tokens_per_block", `{"kv_cache_hash_algo":"v1_block_key"}`, true},
		{"equal block size", `{"kv_cache_hash_algo":"v1_block_key","tokens_per_block":32}`, true},
		{"other block size", `{"kv_cache_hash_algo":"v1_block_key","tokens_per_block":64}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDrainServer(t, nil)
			d.info = tc.info
			inv := kvexact.NewInventory(kvexact.Options{Rule: "r", BlockSize: 32})
			p := Start(Target{Endpoint: "ep", URL: d.srv.URL}, inv, Options{Rule: "r", Interval: time.Millisecond,
				BlockSize: 32, RecheckInterval: time.Millisecond})
			defer p.Close()
			if tc.admit {
				waitFor(t, "drains", func() bool { return d.servedAtLeast(3) })
				return
			}
			waitFor(t, "rechecks", func() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.infos >= 5 })
			if d.servedAtLeast(1) {
				t.Fatal("an engine with another block size was drained")
			}
			d.mu.Lock()
			d.info = `{"tokens_per_block":32}` // the engine was reconfigured
			d.mu.Unlock()
			waitFor(t, "drains after the fix", func() bool { return d.servedAtLeast(1) })
		})
	}
}

// TestHubSharesDrain: sinks naming one engine share its destructive drain:
// each sees every event; one leaving stops only its feed (marked
// disconnected); the last leaving stops the drain. A subscriber whose
// kvBlockSize the engine does not report is refused alone.
func TestHubSharesDrain(t *testing.T) {
	d := newDrainServer(t, nil)
	d.info = `{"tokens_per_block":32}`
	newInv := func(rule string) *kvexact.Inventory {
		return kvexact.NewInventory(kvexact.Options{Rule: rule, BlockSize: 32, Warmup: time.Nanosecond})
	}
	a, b, wrong := newInv("a"), newInv("b"), newInv("wrong")
	h := NewHub()
	target := Target{Endpoint: "ep", URL: d.srv.URL}
	pa := h.Start(target, a, Options{Rule: "a", Interval: time.Millisecond, BlockSize: 32})
	pb := h.Start(target, b, Options{Rule: "b", Interval: time.Millisecond, BlockSize: 32})
	pw := h.Start(target, wrong, Options{Rule: "wrong", Interval: time.Millisecond, BlockSize: 64, RecheckInterval: time.Millisecond})
	defer pw.Close()
	// Events come once both are fed (a joiner sees what is drained after
	// it is admitted).
	waitFor(t, "a and b connected", func() bool { okA, _ := a.Trusted("ep"); okB, _ := b.Trusted("ep"); return okA && okB })
	d.mu.Lock()
	d.drains = captureDrains()[:4]
	served := d.served
	d.mu.Unlock()
	waitFor(t, "the four drains and one poll after them", func() bool { return d.servedAtLeast(served + 5) })
	for name, inv := range map[string]*kvexact.Inventory{"a": a, "b": b} {
		if next, ok := inv.NextSeq("ep", 0); !ok || next != 8 || inv.Blocks("ep") != 1 {
			t.Fatalf("%s: next seq %d %v, %d blocks; want 8 and 1 (every event)", name, next, ok, inv.Blocks("ep"))
		}
	}
	if _, ok := wrong.NextSeq("ep", 0); ok {
		t.Fatal("a subscriber with another block size was fed")
	}
	if err := pa.Close(); err != nil {
		t.Fatal(err)
	}
	if _, why := a.Trusted("ep"); why != kvexact.ReasonDisconnected {
		t.Fatalf("a closed subscriber reads %q, want disconnected", why)
	}
	d.mu.Lock()
	d.drains = append(d.drains, captureDrains()[4]) // a restart: event_id 0
	d.mu.Unlock()
	waitFor(t, "the restart reaches b", func() bool { n, _ := b.NextSeq("ep", 0); return n == 1 })
	if n, _ := a.NextSeq("ep", 0); n != 8 {
		t.Fatalf("a closed subscriber was fed: next seq %d", n)
	}
	if err := pb.Close(); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close()
	// A drain cancelled by Close may still reach the server's handler.
	time.Sleep(10 * time.Millisecond)
	d.mu.Lock()
	served = d.served
	d.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	if d.servedAtLeast(served + 1) {
		t.Fatal("the drain went on after its last subscriber left")
	}
}
