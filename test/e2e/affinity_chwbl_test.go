package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/rules"
)

// affPlainEngine is a minimal OpenAI-compatible engine that counts the
// inference requests it serves.
type affPlainEngine struct {
	addr string
	hits atomic.Int64
}

func startAffPlainEngine(t *testing.T, ip string) *affPlainEngine {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen %s: %v", ip, err)
	}
	e := &affPlainEngine{addr: ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		e.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return e
}

// TestCHWBLExampleDaemon serves configs/single-pool-chwbl.yaml (sel 8) on
// the real daemon, moved to loopback test addresses: its compiled form
// carries the chwbl block with the example's knobs, one prompt keeps going
// to one engine, and the explain API predicts that engine from the prefix.
func TestCHWBLExampleDaemon(t *testing.T) {
	docs, err := rules.LoadFiles(filepath.Join(cliRepoRoot(t), "configs", "single-pool-chwbl.yaml"))
	if err != nil || len(docs) != 1 {
		t.Fatalf("load example: %d docs, %v", len(docs), err)
	}
	r := docs[0].Rule
	bin := cliBuild(t)
	d := cliStartDaemon(t, bin, t.TempDir())

	vipIP := fmt.Sprintf("127.0.0.%d", affIPBase+20)
	engines := make([]*affPlainEngine, len(r.Endpoints))
	for i := range r.Endpoints {
		engines[i] = startAffPlainEngine(t, fmt.Sprintf("127.0.0.%d", affIPBase+21+i))
		host, port, _ := net.SplitHostPort(engines[i].addr)
		r.Endpoints[i].EndpointIP = host
		r.Endpoints[i].TargetPort, _ = strconv.Atoi(port)
	}
	r.ServiceArguments.ExternalIP = vipIP
	r.ServiceArguments.Port = cliFreePort(t)
	vip := net.JoinHostPort(vipIP, strconv.Itoa(r.ServiceArguments.Port))
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), affWait)
	defer cancel()
	if st, b, err := affPost(ctx, d.URL+"/netlox/v1/config/loadbalancer", string(body)); err != nil || st != http.StatusOK {
		t.Fatalf("POST example rule: %d %v %s", st, err, b)
	}

	res := cliRun(t, bin, d.URL, "get", "lb", vipIP, "--tcp="+strconv.Itoa(r.ServiceArguments.Port), "--compiled")
	var compiled struct {
		CHWBL *struct {
			PrefixHashLevel int `json:"prefix_hash_level"`
			MeanLoadFactor  int `json:"mean_load_factor"`
			Replication     int `json:"replication"`
		} `json:"chwbl"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &compiled); err != nil || compiled.CHWBL == nil {
		t.Fatalf("get lb --compiled: exit %d, %v\n%s%s", res.Code, err, res.Stdout, res.Stderr)
	}
	if c := compiled.CHWBL; c.PrefixHashLevel != 2 || c.MeanLoadFactor != 150 || c.Replication != 100 {
		t.Fatalf("compiled chwbl %+v, want the example's level 2, load factor 150, 100 vnodes", *c)
	}

	sys := affSystemPrompt()
	chat := affChatBody(sys, "same question")
	affEventually(t, "the VIP serves", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, _, err := affPost(ctx, "http://"+vip+"/v1/chat/completions", chat)
		return err == nil && st == http.StatusOK
	})
	before := make([]int64, len(engines))
	for i, e := range engines {
		before[i] = e.hits.Load()
	}
	const n = 6
	for range n {
		affSend(t, vip, chat)
	}
	home := -1
	for i, e := range engines {
		switch got := e.hits.Load() - before[i]; {
		case got == n:
			home = i
		case got != 0:
			t.Fatalf("engine %d took %d of %d identical prompts; sel 8 must keep them on one engine", i, got, n)
		}
	}
	if home < 0 {
		t.Fatalf("no engine took the %d prompts", n)
	}

	explainURL := fmt.Sprintf("%s/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp/explain", d.URL, vipIP, r.ServiceArguments.Port)
	st, b, err := affPost(ctx, explainURL, chat)
	if err != nil || st != http.StatusOK {
		t.Fatalf("explain: %d %v %s", st, err, b)
	}
	var ex struct {
		Endpoint string `json:"endpoint"`
		Steps    []struct {
			Tier string `json:"tier"`
			Hit  bool   `json:"hit"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(b, &ex); err != nil {
		t.Fatal(err)
	}
	if ex.Endpoint != engines[home].addr || len(ex.Steps) == 0 || !strings.HasPrefix(ex.Steps[0].Tier, "chwbl_prefix") || !ex.Steps[0].Hit {
		t.Fatalf("explain %s, want a chwbl_prefix hit on %s", b, engines[home].addr)
	}
}
