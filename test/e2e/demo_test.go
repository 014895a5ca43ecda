package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Bounds of the demo end-to-end tests.
const (
	demoReadyTimeout = 60 * time.Second
	demoStopTimeout  = 20 * time.Second
	demoReadyLine    = "demo ready."
	demoRulePD       = "demo-1p1d"
	demoRuleCache    = "demo-cache-aware"
	demoVIPPD        = "127.0.0.10"
)

var (
	demoAPIRe    = regexp.MustCompile(`API:\s+(http://\S+)`)
	demoVIPRe    = regexp.MustCompile(`VIP (127\.0\.0\.10:\d+)`)
	demoVIPCRe   = regexp.MustCompile(`VIP (127\.0\.0\.11:\d+)`)
	demoEngineRe = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+:\d+)\((prefill|decode), pid (\d+)\)`)
)

// demoEngineProc is one engine the demo reported.
type demoEngineProc struct {
	addr, role string
	pid        int
}

// demoProc is one running `infergate demo`.
type demoProc struct {
	cmd      *exec.Cmd
	api      string // management API base URL
	vip      string // VIP:port of demo-1p1d
	vipCache string // VIP:port of demo-cache-aware
	engines  []demoEngineProc
	out      *cliSyncBuffer
	done     chan struct{}
	err      error
}

// demoStart runs `infergate demo` on ephemeral ports and waits for its
// ready banner. It is stopped (SIGINT, then SIGKILL) when the test ends.
func demoStart(t *testing.T, bin string, extra ...string) *demoProc {
	t.Helper()
	d := &demoProc{out: &cliSyncBuffer{}, done: make(chan struct{})}
	args := append([]string{"demo", "--state-dir", t.TempDir(), "--api-addr", "127.0.0.1:0", "--vip-port", "0"}, extra...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stderr = d.out
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			_, _ = d.out.Write(append(sc.Bytes(), '\n'))
			if !signalled && strings.HasPrefix(sc.Text(), demoReadyLine) {
				signalled = true
				close(ready)
			}
		}
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("demo output:\n%s", d.out.String())
		}
	})
	select {
	case <-ready:
	case <-d.done:
		t.Fatalf("demo exited before it was ready: %v\n%s", d.err, d.out.String())
	case <-time.After(demoReadyTimeout):
		t.Fatalf("demo not ready after %v\n%s", demoReadyTimeout, d.out.String())
	}
	text := d.out.String()
	api, vip, vipC := demoAPIRe.FindStringSubmatch(text), demoVIPRe.FindStringSubmatch(text), demoVIPCRe.FindStringSubmatch(text)
	if api == nil || vip == nil || vipC == nil {
		t.Fatalf("demo banner lacks the API or a VIP address:\n%s", text)
	}
	d.api, d.vip, d.vipCache = api[1], vip[1], vipC[1]
	for _, m := range demoEngineRe.FindAllStringSubmatch(text, -1) {
		pid, _ := strconv.Atoi(m[3])
		d.engines = append(d.engines, demoEngineProc{addr: m[1], role: m[2], pid: pid})
	}
	if len(d.engines) != 6 {
		t.Fatalf("demo reported %d engines, want 6:\n%s", len(d.engines), text)
	}
	return d
}

// stop sends SIGINT (Ctrl-C) and waits; SIGKILL after demoStopTimeout.
func (d *demoProc) stop() error {
	select {
	case <-d.done:
		return d.err
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-d.done:
		return d.err
	case <-time.After(demoStopTimeout):
		_ = d.cmd.Process.Kill()
		<-d.done
		return errors.New("demo ignored SIGINT")
	}
}

// demoPost sends one completion to vip and returns status and body.
func demoPost(t *testing.T, vip string, stream bool) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	body := `{"model":"demo-model","prompt":"Hello","max_tokens":8,"stream":` + strconv.FormatBool(stream) + `}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+vip+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", vip, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// demoServes fails t unless one completion through the demo's 1P1D VIP
// answers 200 with choices: the suites built on the demo check P/D
// behaviour, which needs a working P/D path.
func demoServes(t *testing.T, vip string) {
	t.Helper()
	if status, body := demoPost(t, vip, false); status != http.StatusOK || !strings.Contains(body, `"choices"`) {
		t.Errorf("request through %s: %d %s", vip, status, body)
	}
}

// TestDemoServesAndStops: `infergate demo` (what `make run` starts) comes up
// with its engines as separate processes, serves a request through the
// 1P1D VIP and exits 0 on SIGINT with every engine gone and its ports free.
func TestDemoServesAndStops(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes")
	}
	bin := cliBuild(t)
	d := demoStart(t, bin)

	demoServes(t, d.vip)
	// The rules the demo installed are visible through the API.
	resp, err := http.Get(d.api + "/netlox/v1/config/loadbalancer/all")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		LbAttr []struct {
			ServiceArguments struct {
				Name string `json:"name"`
			} `json:"serviceArguments"`
		} `json:"lbAttr"`
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list.LbAttr {
		names = append(names, r.ServiceArguments.Name)
	}
	if got := strings.Join(names, ","); !strings.Contains(got, demoRulePD) || !strings.Contains(got, demoRuleCache) {
		t.Errorf("rules = %s, want %s and %s", got, demoRulePD, demoRuleCache)
	}
	for _, e := range d.engines {
		if c, err := net.DialTimeout("tcp", e.addr, time.Second); err != nil {
			t.Errorf("engine %s (pid %d) not listening: %v", e.addr, e.pid, err)
		} else {
			c.Close()
		}
	}

	if err := d.stop(); err != nil {
		t.Fatalf("demo exit after SIGINT: %v", err)
	}
	if !bytes.Contains([]byte(d.out.String()), []byte("demo: stopping")) {
		t.Errorf("no shutdown message in the demo output")
	}
	for _, e := range d.engines {
		if err := syscall.Kill(e.pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("engine pid %d still exists after the demo stopped (kill 0: %v)", e.pid, err)
		}
	}
	apiAddr := strings.TrimPrefix(d.api, "http://")
	for _, addr := range []string{apiAddr, d.vip} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still bound after the demo stopped: %v", addr, err)
			continue
		}
		l.Close()
	}
}
