package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
)

// selRegistrar runs `infergate register` beside a fake engine.
func selRegistrar(t *testing.T, bin, store string, e *pdfake.Engine, role, engine string, extra ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"register", "--store", store, "--url", "http://" + e.AddrPort().String(),
		"--role", role, "--engine", engine, "--model", "fake-model", "--ttl", "2s"}, extra...)
	cmd := exec.Command(bin, args...)
	log := &cliSyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("register %s log:\n%s", e.AddrPort(), log.String())
		}
	})
	return cmd
}

// TestSelectorRegistrationsThroughDaemon drives `infergate serve` on an etcd
// store with a vLLM P/D rule whose endpoints come from endpointSelector:
// the rule is accepted and not ready with a reason while nothing is
// registered; engines started with `infergate register` become endpoints
// once they pass the rule's HTTP probe and serve traffic; a registration
// the rule cannot use (an SGLang decode) is refused, listed with its reason
// in /status and counted; when a decode's registrar is killed its lease
// expires under traffic and it drains while every request still succeeds
// on the other decode.
func TestSelectorRegistrationsThroughDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, the daemon and fake engines")
	}
	etcd := etcdtest.Start(t, 1)
	store := etcd.URL("/sel")
	bin := cliBuild(t)
	d := cliStartDaemon(t, bin, t.TempDir(), "--store", store)
	api := &http.Client{Timeout: 5 * time.Second}

	const vip = "127.0.0.150"
	port := cliFreePort(t)
	rule := fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","mode":4,"name":"selected",`+
		`"pd_disagg_mode":true,"kvEngineType":"vllm","probetype":"http","probereq":"/health"},`+
		`"endpointSelector":{"model":"fake-model"}}`, vip, port)
	if st, _, b := rnPost(api, d.URL+"/netlox/v1/config/loadbalancer", rule); st != 200 {
		t.Fatalf("POST selector rule: %d %s", st, b)
	}
	statusURL := fmt.Sprintf("%s/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp/status", d.URL, vip, port)
	if st, b := rnGet(api, statusURL); st != 200 || !strings.Contains(b, `"ready":false`) || !strings.Contains(b, "no usable registration") {
		t.Fatalf("status before any registration: %d %s", st, b)
	}

	p := affFake(t, "127.0.0.151", pdfake.Prefill)
	d1 := affFake(t, "127.0.0.152", pdfake.Decode)
	d2 := affFake(t, "127.0.0.153", pdfake.Decode)
	sg := affFake(t, "127.0.0.154", pdfake.Decode)
	selRegistrar(t, bin, store, p, "prefill", "vllm")
	reg1 := selRegistrar(t, bin, store, d1, "decode", "vllm")
	selRegistrar(t, bin, store, d2, "decode", "vllm")
	selRegistrar(t, bin, store, sg, "decode", "sglang")

	vipURL := fmt.Sprintf("http://%s:%d/v1/chat/completions", vip, port)
	eventually(t, 20*time.Second, "the registered engines to serve", func() bool {
		st, _, _ := rnPost(api, vipURL, affChatBody("sys", "warm-up"))
		return st == 200
	})
	eventually(t, 10*time.Second, "the SGLang decode refused in /status", func() bool {
		_, b := rnGet(api, statusURL)
		return strings.Contains(b, `"ready":true`) && strings.Contains(b, `"127.0.0.154:`) &&
			strings.Contains(b, "engine: registered as sglang but the rule's kvEngineType is vllm")
	})
	if _, m := rnGet(api, d.URL+"/metrics"); !strings.Contains(m, `infergate_store_registrations_refused_total{reason="engine"} 1`) {
		t.Fatalf("refusal not counted:\n%s", grepLines(m, "registrations_refused"))
	}

	// Traffic while d1's registrar dies (SIGKILL: no revoke, the 2 s lease
	// expires): every request succeeds, then d1 gets no new decode legs.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sent, failed atomic.Int64
	var lastFail atomic.Value
	// done counts each worker's finished requests: a request in flight when
	// d1 left may still send its decode leg to d1 on the generation it
	// started on; the check below waits for those to finish.
	var done [2]atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				select {
				case <-stop:
					return
				default:
				}
				st, _, b := rnPost(api, vipURL, affChatBody("sys", fmt.Sprintf("worker %d request %d", w, i)))
				sent.Add(1)
				if st != 200 {
					failed.Add(1)
					lastFail.Store(fmt.Sprintf("%d %s", st, b))
				}
				done[w].Add(1)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	_ = reg1.Process.Kill()
	eventually(t, 15*time.Second, "d1 to leave the rule", func() bool {
		_, b := rnGet(api, statusURL)
		return !strings.Contains(b, `"127.0.0.152:`)
	})
	// Every request started from here runs on a generation without d1;
	// once each worker has finished two more, none started before is left.
	var mark [2]int64
	for w := range done {
		mark[w] = done[w].Load()
	}
	eventually(t, 15*time.Second, "the requests in flight when d1 left to finish", func() bool {
		return done[0].Load() >= mark[0]+2 && done[1].Load() >= mark[1]+2
	})
	before := len(d1.Records())
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed while d1's lease expired; last: %v", failed.Load(), sent.Load(), lastFail.Load())
	}
	if after := len(d1.Records()); after != before {
		t.Fatalf("d1 got %d decode legs after it left the rule", after-before)
	}
	if len(d2.Records()) == 0 || len(sg.Records()) != 0 {
		t.Fatalf("decode legs: d2 %d, refused SGLang decode %d", len(d2.Records()), len(sg.Records()))
	}
	t.Logf("%d requests, none failed, while a registered decode's lease expired", sent.Load())
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
