package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/internal/kvfake"
	"github.com/infergate/infergate/kvexact/bpe"
	"github.com/infergate/infergate/kvexact/tokenize"
	"github.com/infergate/infergate/spec"
)

// kvBlockSize is the pool's kvBlockSize (poolRule).
const kvBlockSize = 16

// kvFeed is the fake engines' KV-event publishers. Endpoint i holds the
// KV blocks of the prompts whose shared prefix the workload homes on it
// (prefix j on endpoint j mod n), so KV-exact scores populated inventories
// during the measurement: with empty ones its scan ends at block 0. Every
// second each engine publishes its blocks again, as a busy engine keeps
// publishing, so the work sent to it never reads as a stale feed.
type kvFeed struct {
	pubs     []*kvfake.Publisher
	payloads [][][]byte // per endpoint: its batches, encoded once
	stop     chan struct{}
	done     chan struct{}
}

// startKVFeed binds one publisher per endpoint on port (each endpoint has
// a loopback address of its own, plan.endpointIP, so each fake engine binds
// its KV-event socket on its endpoint's address and the port the rule names,
// as a real engine does) and computes what
// each holds: the full blocks of a request on each of the workload's
// prefixes, tokenised as the EPP does (tokenizer dir tok).
func startKVFeed(plan *netPlan, n, port int, w *workload, tok string) (*kvFeed, error) {
	f := &kvFeed{stop: make(chan struct{}), done: make(chan struct{}), payloads: make([][][]byte, n)}
	t, err := bpe.LoadFile(filepath.Join(tok, tokenize.FileTokenizerGz))
	if err != nil {
		return nil, err
	}
	tmpl, err := bpe.LoadTemplate(filepath.Join(tok, tokenize.FileTokenizerConfig))
	if err != nil {
		return nil, err
	}
	for j := range w.prefixes {
		var req struct {
			Messages []bpe.Message `json:"messages"`
		}
		if err := json.Unmarshal(w.body(uint64(j)), &req); err != nil {
			return nil, err
		}
		ids, err := t.EncodeChat(tmpl, req.Messages, true)
		if err != nil {
			return nil, err
		}
		ev := kvfake.BlockStored{BlockSize: kvBlockSize, TokenIDs: ids[:len(ids)/kvBlockSize*kvBlockSize]}
		for b := range len(ev.TokenIDs) / kvBlockSize {
			ev.BlockHashes = append(ev.BlockHashes, uint64(j+1)<<32|uint64(b))
		}
		raw, err := kvfake.Encode(kvfake.Batch{TS: 1, Events: []any{ev}}, kvfake.Encoding{})
		if err != nil {
			return nil, err
		}
		f.payloads[j%n] = append(f.payloads[j%n], raw)
	}
	for i := range n {
		o := kvfake.DefaultOptions()
		o.PubAddr = "tcp://" + plan.endpointIP(i) + ":" + strconv.Itoa(port)
		o.ReplayBuffer = 1 // no replay socket: keep no history in the EPP's heap
		p, err := kvfake.Start(o)
		if err != nil {
			f.close()
			return nil, fmt.Errorf("KV-event publisher of endpoint %d: %w", i, err)
		}
		f.pubs = append(f.pubs, p)
	}
	return f, nil
}

// run publishes every endpoint's blocks once subscribed, then again every
// second until close. The payloads are encoded once: the fake engines share
// the EPP's process, and their garbage would count as the EPP's.
func (f *kvFeed) run() {
	defer close(f.done)
	if !f.waitSubscribed(30 * time.Second) {
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	seqs := make([]uint64, len(f.pubs)) // each engine numbers its own batches
	for {
		for i, p := range f.pubs {
			for _, raw := range f.payloads[i] {
				_ = p.PublishRaw(seqs[i], raw)
				seqs[i]++
			}
		}
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
	}
}

// waitSubscribed waits up to d for each publisher's subscriber, in short
// steps so that close (a daemon that failed to start) does not wait out d.
func (f *kvFeed) waitSubscribed(d time.Duration) bool {
	for _, p := range f.pubs {
		deadline := time.Now().Add(d)
		for p.WaitSubscribers(1, 100*time.Millisecond) != nil {
			select {
			case <-f.stop:
				return false
			default:
			}
			if time.Now().After(deadline) {
				return false
			}
		}
	}
	return true
}

func (f *kvFeed) close() {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	if len(f.pubs) > 0 {
		<-f.done
	}
	for _, p := range f.pubs {
		_ = p.Close()
	}
}

// waitKVTrusted waits until the daemon at apiAddr trusts every endpoint's
// inventory and each holds blocks (the subscribers' warm-up past), so the
// measurement starts with KV-exact steering.
func waitKVTrusted(apiAddr string, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last []spec.InventoryRow
	for time.Now().Before(deadline) {
		if rows, err := kvInventory(apiAddr); err == nil {
			last = rows
			ok := 0
			for _, r := range rows {
				if r.Trusted && r.Blocks > 0 {
					ok++
				}
			}
			if ok >= n {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("KV inventories not all trusted within %v: %+v", d, last)
}

func kvInventory(apiAddr string) ([]spec.InventoryRow, error) {
	resp, err := http.Get("http://" + apiAddr + api.BasePath + "/config/ai/kv/inventory")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v api.KVInventoryView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, err
	}
	return v.Rows, nil
}
