package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testport"
)

// Bounds of the datapath end-to-end test.
const (
	dpBuildTimeout = 5 * time.Minute
	dpReadyTimeout = 20 * time.Second
	dpWorkers      = 8
	dpBody         = `{"model":"fake-model","prompt":"hello","max_tokens":4}`
)

// dpBuild builds the fake engine and the single-rule datapath server.
func dpBuild(t *testing.T) (engine, gateway string) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), dpBuildTimeout)
	defer cancel()
	engine, gateway = filepath.Join(dir, "fakeengine"), filepath.Join(dir, "dpserve")
	for out, pkg := range map[string]string{engine: "./internal/fakeengine/cmd/fakeengine", gateway: "./test/bench/dpserve"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = dpRepoRoot(t)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	return engine, gateway
}

// dpStart runs bin in its own process group, killed when the test ends, and
// waits until addr accepts connections.
func dpStart(t *testing.T, addr, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out dpLog
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	deadline := time.Now().Add(dpReadyTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s: %v\n%s", filepath.Base(bin), addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dpAddr returns a loopback address that is free right now, on a port
// outside the ephemeral range (testport.Free), so no client's source port
// takes it before the engine or rule binds it.
func dpAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testport.Free(t)))
}

// dpRepoRoot is the module root, two levels above this package.
func dpRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// dpLog collects a child's output for failure messages.
type dpLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *dpLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *dpLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDatapathEngineProcessKilled runs three fake engine processes behind the
// datapath, SIGKILLs one under load and checks that only requests already on
// it can fail, then that SSE still streams through the survivors.
func TestDatapathEngineProcessKilled(t *testing.T) {
	engineBin, gatewayBin := dpBuild(t)
	var engines []string
	var victim *exec.Cmd
	for i := range 3 {
		a := dpAddr(t)
		cmd := dpStart(t, a, engineBin, "-addr", a, "-name", fmt.Sprint("e", i), "-latency", "2ms")
		engines = append(engines, a)
		victim = cmd
	}
	gw := dpAddr(t)
	dpStart(t, gw, gatewayBin, "-listen", gw, "-engine", strings.Join(engines, ","), "-cb")
	url := "http://" + gw + "/v1/completions"

	var ok, failed atomic.Int64
	var errMu sync.Mutex
	var errs []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: dpWorkers}}
	defer client.CloseIdleConnections()
	for range dpWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 200000; k++ { // bounded
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Post(url, "application/json", strings.NewReader(dpBody))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d %s", resp.StatusCode, resp.Header.Get("X-Infergate-Error"))
					}
				}
				if err != nil {
					failed.Add(1)
					errMu.Lock()
					errs = append(errs, err.Error())
					errMu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	waitUntil := func(what string, cond func() bool) {
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("timed out waiting for %s (ok %d failed %d)", what, ok.Load(), failed.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitUntil("warm traffic", func() bool { return ok.Load() > 300 })
	failedBefore := failed.Load()
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	okAtKill := ok.Load()
	waitUntil("traffic after the kill", func() bool { return ok.Load() > okAtKill+1000 })
	close(stop)
	wg.Wait()
	if lost := failed.Load() - failedBefore; failedBefore != 0 || lost > dpWorkers {
		t.Fatalf("failed before kill %d, after %d (at most %d were in flight): %v", failedBefore, lost, dpWorkers, errs)
	}

	// SSE through the survivors: every chunk and the terminator arrive.
	resp, err := client.Post("http://"+gw+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := 0
	sc := bufio.NewScanner(resp.Body)
	last := ""
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
			last = sc.Text()
		}
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" || events != 5 || last != "data: [DONE]" {
		t.Fatalf("SSE through the gateway: type %q, %d events, last %q", resp.Header.Get("Content-Type"), events, last)
	}
}
