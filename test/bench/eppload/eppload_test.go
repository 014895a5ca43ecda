package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/rules"
)

// The rule the served EPP picks from is a valid rule with the endpoints
// and the KV-exact mode asked for.
func TestPoolRuleValidates(t *testing.T) {
	for _, kv := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "pool.yaml")
		if err := os.WriteFile(path, []byte(poolRule("epp-bench", &netPlan{ip: net.IPv4(127, 0, 0, 1).To4()}, 18080, 16, 20001, kv, 15999)), 0o600); err != nil {
			t.Fatal(err)
		}
		docs, err := rules.LoadFiles(path)
		if err != nil || len(docs) != 1 {
			t.Fatalf("kv=%v: %d documents, %v", kv, len(docs), err)
		}
		_, c, err := rules.Prepare(docs[0].Rule)
		if err != nil {
			t.Fatalf("kv=%v: %v", kv, err)
		}
		if len(c.Endpoints) != 16 || c.Name != "epp-bench" || (c.KV != nil) != kv {
			t.Errorf("kv=%v: compiled %d endpoints, name %q, KV-exact %v", kv, len(c.Endpoints), c.Name, c.KV != nil)
		}
	}
}

// Bodies are chat completions of the asked size, shared prefixes with a
// unique tail.
func TestWorkloadBodies(t *testing.T) {
	w := newWorkload(4, 8<<10)
	a, b, c := w.body(1), w.body(2), w.body(5)
	for _, body := range [][]byte{a, b, c} {
		var v struct {
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal(body, &v); err != nil || len(v.Messages) != 2 {
			t.Fatalf("body is not a two-message chat: %v", err)
		}
		if len(body) < 8<<10-64 || len(body) > 8<<10+64 {
			t.Errorf("body of %d bytes, want about %d", len(body), 8<<10)
		}
	}
	if string(a) == string(c) {
		t.Error("two requests on one prefix have the same body")
	}
	if string(a[:4096]) != string(c[:4096]) || string(a[:4096]) == string(b[:4096]) {
		t.Error("requests 1 and 5 should share a prefix, 1 and 2 not")
	}
}
