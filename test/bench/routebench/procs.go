package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/infergate/infergate/test/bench/proccpu"
	"github.com/infergate/infergate/test/enginesim"
)

// proc is a child process in its own process group, so stopping it stops
// everything it started.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProc(name string, log io.Writer, bin string, args ...string) (*proc, io.Reader, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.Copy(io.MultiWriter(pw, log), out)
		_ = pw.Close()
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, pr, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM to the group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p == nil {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.done
}

// waitLine reads r until a line equal to want, bounded by timeout.
func waitLine(r io.Reader, want string, timeout time.Duration) error {
	found := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == want {
				found <- nil
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
		found <- errors.New("output ended before " + want)
	}()
	select {
	case err := <-found:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("no %q within %v", want, timeout)
	}
}

// freePort returns a free TCP port on ip.
func freePort(ip string) (int, error) {
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// gateway is the running infergate.
type gateway struct {
	p   *proc
	api string // http://127.0.0.1:port
}

func startGateway(bin, stateDir, tokenizer string, log io.Writer, extra []string) (*gateway, error) {
	g, err := launchGateway(bin, stateDir, tokenizer, log, extra)
	if err != nil {
		return nil, err
	}
	if err := g.waitAPI(); err != nil {
		g.p.stop(3 * time.Second)
		return nil, err
	}
	return g, nil
}

// launchGateway starts infergate without waiting for it: it loads its
// tokenizer while the caller starts the fleet; waitAPI waits for it.
func launchGateway(bin, stateDir, tokenizer string, log io.Writer, extra []string) (*gateway, error) {
	port, err := freePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	api := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"serve", "--state-dir", stateDir, "--api-addr", api, "--log-level", "warn"}
	if tokenizer != "" {
		args = append(args, "--kv-tokenizer", tokenizer)
	}
	args = append(args, extra...)
	p, out, err := startProc("infergate", log, bin, args...)
	if err != nil {
		return nil, err
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return &gateway{p: p, api: "http://" + api}, nil
}

// waitAPI waits until the management API accepts rule writes.
func (g *gateway) waitAPI() error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		// /readyz, not a read: reads answer during the boot replay, while
		// rule writes are still refused (503 not_ready).
		resp, err := c.Get(g.api + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-g.p.done:
			return errors.New("infergate exited during start (see its log)")
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("infergate API not ready within 20s")
}

// stopper is a process or fleet that a deferred stop may also end.
type stopper interface{ stop(grace time.Duration) }

// stopAll stops processes (and fleets) at once rather than one after the
// other (each takes a second or two to exit); nil ones are skipped, stopped
// ones return at once, so deferred stops may follow.
func stopAll(grace time.Duration, ps ...stopper) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { p.stop(grace) })
	}
	wg.Wait()
}

// apply creates one rule through the management API.
func (g *gateway) apply(rule map[string]any) error {
	b, _ := json.Marshal(rule)
	resp, err := http.Post(g.api+"/netlox/v1/config/loadbalancer", "application/json", bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("create rule: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("create rule: %d %s", resp.StatusCode, msg)
	}
	return nil
}

func (g *gateway) metrics(ctx context.Context, c *http.Client) (series, error) {
	return scrape(ctx, c, g.api+"/metrics", gatewayMetric)
}

func (g *gateway) cpu() time.Duration {
	d, _ := proccpu.Of(g.p.pid())
	return d
}

// armRule is the rule an arm's VIP serves: the same endpoints, a different
// choice.
func armRule(arm, vipIP string, port int, engines []string, zmqPort int, roles []int) map[string]any {
	sa := map[string]any{"externalIP": vipIP, "port": port, "protocol": "tcp", "mode": 4, "sse_mode": true,
		"probetype": "http", "probereq": "/health", "name": "bench-" + arm}
	switch arm {
	case armRR:
		sa["sel"] = 0
	case armLeast:
		sa["sel"] = 4
	case armPrefix:
		// configs/single-pool-chwbl.yaml's knobs.
		sa["sel"], sa["chwbl_prefix_hash_level"], sa["chwbl_mean_load_factor"], sa["chwbl_replication"] = 8, 2, 150, 100
	case armKV, armKVLegacy: // the legacy arm: the same rule on a gateway with the old guard
		sa["sel"], sa["kvExactMode"], sa["kvEngineType"], sa["kvZmqPort"], sa["kvBlockSize"] = 4, 3, "vllm", zmqPort, 16
	case armWindowed:
		// Least connections among the endpoints with room, each admitting
		// as many as the simulated engine batches.
		sa["sel"], sa["admission_window"] = 4, enginesim.DefaultOptions().MaxNumSeqs
	case armPDLeast, armPDPrefix, armPDKV:
		sa["sel"], sa["pd_disagg_mode"] = 0, true
		if arm == armPDPrefix {
			sa["pd_cache_aware_mode"] = true
		}
		if arm == armPDKV {
			sa["kvExactMode"], sa["kvEngineType"], sa["kvZmqPort"], sa["kvBlockSize"] = 1, "vllm", zmqPort, 16
		}
	}
	eps := make([]map[string]any, len(engines))
	for i, e := range engines {
		host, port, _ := net.SplitHostPort(strings.TrimPrefix(e, "http://"))
		var p int
		_, _ = fmt.Sscan(port, &p)
		eps[i] = map[string]any{"endpointIP": host, "targetPort": p, "weight": 1}
		if roles != nil {
			eps[i]["ep_role"] = roles[i]
			eps[i]["nixl_port"] = 15600
		}
	}
	return map[string]any{"serviceArguments": sa, "endpoints": eps}
}

// The second gateways' VIPs, as offsets from --vip-base: past the main
// gateway's single-pool arms and its P/D arms.
const (
	vipOffsetLegacy  = 16 // the legacy-guard arm (busy.go)
	vipOffsetLearned = 17 // the learned-window arm (flowfleet.go)
)

// startSideGateway starts a second gateway (the legacy-guard or the
// learned-window arm's) with a state directory of its own; stop ends it and
// removes the directory.
func (b *bench) startSideGateway(name, bin string, logf io.Writer, args []string) (g *gateway, stop func(), err error) {
	stateDir, err := os.MkdirTemp("", "routebench-"+name+"-")
	if err != nil {
		return nil, nil, err
	}
	g, err = startGateway(bin, stateDir, b.cfg.gatewayTokenizer(), logf, args)
	if err != nil {
		os.RemoveAll(stateDir)
		return nil, nil, fmt.Errorf("%s gateway: %w", name, err)
	}
	return g, func() {
		g.p.stop(5 * time.Second)
		os.RemoveAll(stateDir)
	}, nil
}

// vipAt is the address n after --vip-base.
func (b *bench) vipAt(n int) netip.Addr {
	vip := netip.MustParseAddr(b.cfg.vipBase)
	for range n {
		vip = vip.Next()
	}
	return vip
}

// serveArm applies arm's rule on g at vip (the run's VIP port) and waits
// until the VIP serves.
func (b *bench) serveArm(ctx context.Context, g *gateway, arm string, vip netip.Addr, roles []int) error {
	return b.serveRule(ctx, g, arm, vip, armRule(arm, vip.String(), b.cfg.vipPort, b.engines, b.cfg.zmqPort, roles))
}

// serveRule applies rule on g as arm, served at vip, and waits until the
// VIP serves.
func (b *bench) serveRule(ctx context.Context, g *gateway, arm string, vip netip.Addr, rule map[string]any) error {
	if err := g.apply(rule); err != nil {
		return fmt.Errorf("arm %s: %w", arm, err)
	}
	b.vips[arm] = fmt.Sprintf("http://%s:%d", vip, b.cfg.vipPort)
	if err := waitServing(ctx, b.scrapeC, b.vips[arm], b.cfg.model, 20*time.Second); err != nil {
		return fmt.Errorf("arm %s: %w", arm, err)
	}
	return nil
}

// waitServing sends tiny requests to url until one succeeds.
func waitServing(ctx context.Context, c *http.Client, url, model string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	body := fmt.Sprintf(`{"model":%q,"prompt":" hello","max_tokens":1}`, model)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+pathCompletions, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("%s not serving within %v: %s", url, timeout, last)
}

func writeFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
