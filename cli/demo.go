package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/daemon"
	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
)

// Demo layout: VIPs and engines on their own 127.0.0.x addresses, so fixed
// VIP ports do not clash with anything on 127.0.0.1 and engines take
// ephemeral ports (learned from their banner).
const (
	demoRule1P1D       = "demo-1p1d"
	demoRuleCacheAware = "demo-cache-aware"
	demoVIP1P1D        = "127.0.0.10"
	demoVIPCacheAware  = "127.0.0.11"
	demoDefaultVIPPort = 8080
	demoEngineDialect  = "vllm"
	demoModel          = "demo-model"
	demoProbePath      = "/health"
	// demoKVBlockSize is the fake engines' --block-size; the rule uses the
	// same unless --kv-block-size says otherwise (a parity demo).
	demoKVBlockSize = 16
	// demoKVWarmupSec: a fresh inventory is trusted after one second, so
	// the demo's Tier 1.5 works on the first requests.
	demoKVWarmupSec = 1
	// demoStartTimeout bounds each engine's banner and the rules' readiness.
	demoStartTimeout = 20 * time.Second
	// demoStopTimeout bounds each engine's exit after SIGTERM before SIGKILL.
	demoStopTimeout = 5 * time.Second
	pathReadyz      = "/readyz"
	epRolePrefill   = 1
	epRoleDecode    = 2
)

// bannerAddr finds addr=ip:port in a pdfake banner line.
var bannerAddr = regexp.MustCompile(`addr=(\S+)`)

// demoEngineSpec is one engine the demo starts.
type demoEngineSpec struct {
	ip   string
	role string // pdfake role: prefill|decode
}

// demoRuleSpec is one demo rule and its engines.
type demoRuleSpec struct {
	name       string
	vip        string
	cacheAware bool // pd_cache_aware_mode + kvExactMode 1; prefills publish KV events
	engines    []demoEngineSpec
}

func demoRules() []demoRuleSpec {
	return []demoRuleSpec{
		{name: demoRule1P1D, vip: demoVIP1P1D, engines: []demoEngineSpec{
			{"127.0.0.21", "prefill"}, {"127.0.0.22", "decode"},
		}},
		// 2P2D with Tier 1 prefix affinity and Tier 1.5 KV-exact: the
		// prefills serve /tokenize and publish vLLM KV events over ZMQ.
		{name: demoRuleCacheAware, vip: demoVIPCacheAware, cacheAware: true, engines: []demoEngineSpec{
			{"127.0.0.23", "prefill"}, {"127.0.0.24", "prefill"}, {"127.0.0.25", "decode"}, {"127.0.0.26", "decode"},
		}},
	}
}

type demoFlags struct {
	stateDir    string
	apiAddr     string
	vipPort     int
	logLevel    string
	kvBlockSize int // the cache-aware rule's kvBlockSize
}

func newDemoCmd(g *globals) *cobra.Command {
	f := demoFlags{apiAddr: "127.0.0.1:11111", vipPort: demoDefaultVIPPort, logLevel: "warn", kvBlockSize: demoKVBlockSize}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the gateway with fake engines behind a 1P1D and a cache-aware P/D rule (make run)",
		Long: `demo starts the gateway in-process, starts fake vLLM prefill/decode engines as
separate processes of this binary, installs two P/D rules and prints the
requests to try and the validate command. Ctrl-C stops everything.`,
		Args: exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if g.env.Serve == nil {
				return errors.New("demo is not available in this build (no daemon)")
			}
			if f.stateDir == "" {
				return usagef("--state-dir is required")
			}
			level, err := logrus.ParseLevel(f.logLevel)
			if err != nil {
				return usagef("--log-level %q: %v", f.logLevel, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDemo(ctx, g, f, level)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.stateDir, "state-dir", "", "directory of the demo's persisted rule set (required)")
	fl.StringVar(&f.apiAddr, "api-addr", f.apiAddr, "management API listen address (port 0: ephemeral)")
	fl.IntVar(&f.vipPort, "vip-port", f.vipPort, "port of the demo VIPs (0: a free one)")
	fl.StringVar(&f.logLevel, "log-level", f.logLevel, "gateway log level")
	fl.IntVar(&f.kvBlockSize, "kv-block-size", f.kvBlockSize, "kvBlockSize of the cache-aware rule (engines publish 16-token blocks; another value shows the parity failure)")
	_ = fl.MarkHidden("kv-block-size")
	return cmd
}

func runDemo(ctx context.Context, g *globals, f demoFlags, level logrus.Level) error {
	out := g.env.Stdout
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: find own binary: %w", err)
	}
	if f.vipPort == 0 {
		if f.vipPort, err = freeSharedPort(demoVIP1P1D, demoVIPCacheAware); err != nil {
			return err
		}
	}
	kvPort, err := freeSharedPort(kvPublisherIPs()...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.apiAddr)
	if err != nil {
		return fmt.Errorf("demo: listen on %s: %w", f.apiAddr, err)
	}
	apiURL := "http://" + ln.Addr().String()

	// Engines first: if one cannot start there is nothing to demo.
	var engines []*demoEngine
	defer func() { stopEngines(g.env.Stderr, engines) }()
	addrs := map[string][]string{} // rule → engine addr in spec order
	for _, rs := range demoRules() {
		for _, es := range rs.engines {
			port := 0
			if rs.cacheAware && es.role == "prefill" {
				port = kvPort
			}
			e, err := startDemoEngine(ctx, exe, es, port, g.env.Stderr)
			if err != nil {
				ln.Close()
				return err
			}
			engines = append(engines, e)
			addrs[rs.name] = append(addrs[rs.name], e.addr)
		}
	}

	log := logrus.New()
	log.SetOutput(g.env.Stderr)
	log.SetLevel(level)
	opts := daemon.DefaultOptions()
	opts.StateDir, opts.APIListener, opts.LogLevel = f.stateDir, ln, f.logLevel
	opts.DrainGrace, opts.ShutdownTimeout = 2*time.Second, 5*time.Second
	dctx, cancelDaemon := context.WithCancel(ctx)
	defer cancelDaemon()
	served := make(chan error, 1)
	go func() { served <- g.env.Serve(dctx, opts, log) }()
	daemonDone := false
	defer func() {
		cancelDaemon()
		if !daemonDone {
			<-served
		}
	}()

	hc := &http.Client{Timeout: 5 * time.Second}
	if err := waitHTTP(ctx, hc, apiURL+pathReadyz, served); err != nil {
		daemonDone = errors.Is(err, errDaemonExited)
		if ctx.Err() != nil && !daemonDone {
			return nil // Ctrl-C during start-up: a clean stop
		}
		return fmt.Errorf("demo: gateway did not become ready: %w", err)
	}
	api := client.New(apiURL, hc)
	for _, rs := range demoRules() {
		// A rule persisted by an earlier run may sit on another VIP port;
		// replace it rather than keep a second rule on dead engines.
		if err := api.DeleteByName(ctx, rs.name); err != nil && !client.IsNotFound(err) {
			return fmt.Errorf("demo: remove the previous %s: %w", rs.name, err)
		}
		r := demoRule(rs, f.vipPort, addrs[rs.name], kvPort, f.kvBlockSize)
		if _, err := api.Apply(ctx, r); err != nil {
			return fmt.Errorf("demo: apply rule %s: %w", rs.name, err)
		}
	}
	printDemo(out, apiURL, f.vipPort, engines)
	// An engine that exits (killed to try validate's diagnosis) is reported,
	// and the demo keeps running so the degraded rule can be inspected.
	died := make(chan *demoEngine, len(engines))
	for _, e := range engines {
		go func() {
			select {
			case <-e.done:
				died <- e
			case <-ctx.Done():
			}
		}()
	}
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "demo: stopping (gateway, then engines)")
			waiting = false
		case e := <-died:
			fmt.Fprintf(out, "demo: engine %s (%s, pid %d) exited; its rule is degraded — try: infergate --server %s validate <rule>\n",
				e.addr, e.spec.role, e.cmd.Process.Pid, apiURL)
		case err := <-served:
			daemonDone = true
			if err != nil {
				return fmt.Errorf("demo: gateway stopped: %w", err)
			}
			return errors.New("demo: gateway stopped")
		}
	}
	cancelDaemon()
	if err := <-served; err != nil {
		daemonDone = true
		return fmt.Errorf("demo: gateway shutdown: %w", err)
	}
	daemonDone = true
	return nil
}

// demoRule is the LoxiLB rule of rs with its engines' bound addresses.
func demoRule(rs demoRuleSpec, vipPort int, addrs []string, kvPort, kvBlockSize int) rules.Rule {
	r := rules.Rule{ServiceArguments: rules.ServiceArguments{
		Name: rs.name, ExternalIP: rs.vip, Port: vipPort, Protocol: "tcp", Mode: modeFullProxy,
		PDDisaggMode: true, KVEngineType: demoEngineDialect, SSEMode: true,
		ProbeType: "http", ProbeReq: demoProbePath,
	}}
	if rs.cacheAware {
		r.ServiceArguments.PDCacheAwareMode = true
		r.ServiceArguments.PDCacheThreshold = 20
		r.ServiceArguments.PDSessionTTLSec = 600
		r.ServiceArguments.KVExactMode = 1
		r.ServiceArguments.KVZmqPort = kvPort
		r.ServiceArguments.KVBlockSize = kvBlockSize
		r.ServiceArguments.KVWarmupSec = demoKVWarmupSec
	}
	for i, es := range rs.engines {
		host, port, _ := net.SplitHostPort(addrs[i])
		n, _ := strconv.Atoi(port)
		role := epRolePrefill
		if es.role == "decode" {
			role = epRoleDecode
		}
		r.Endpoints = append(r.Endpoints, rules.Endpoint{EndpointIP: host, TargetPort: n, Weight: 1, EPRole: role})
	}
	return r
}

func printDemo(w io.Writer, apiURL string, vipPort int, engines []*demoEngine) {
	vip1 := net.JoinHostPort(demoVIP1P1D, strconv.Itoa(vipPort))
	vip2 := net.JoinHostPort(demoVIPCacheAware, strconv.Itoa(vipPort))
	fmt.Fprintf(w, `
infergate demo is running.
  API:   %s   (export INFERGATE_SERVER=%s)
  rule %-17s vLLM 1P1D                 VIP %s
  rule %-17s vLLM 2P2D, prefix + KV-exact VIP %s
  engines (separate processes):`, apiURL, apiURL, demoRule1P1D, vip1, demoRuleCacheAware, vip2)
	for _, e := range engines {
		fmt.Fprintf(w, " %s(%s, pid %d)", e.addr, e.spec.role, e.cmd.Process.Pid)
	}
	fmt.Fprintf(w, `

Try:
  curl -s http://%[1]s/v1/completions -H 'Content-Type: application/json' \
       -d '{"model":"%[3]s","prompt":"Hello","max_tokens":8}'
  curl -sN http://%[1]s/v1/completions -H 'Content-Type: application/json' \
       -d '{"model":"%[3]s","prompt":"Hello","max_tokens":8,"stream":true}'
  curl -s http://%[2]s/v1/chat/completions -H 'Content-Type: application/json' \
       -d '{"model":"%[3]s","messages":[{"role":"user","content":"Hello"}]}'
  bin/infergate --server %[4]s get lb -o wide
  bin/infergate --server %[4]s validate %[5]s
  bin/infergate --server %[4]s validate %[6]s --disruptive
  curl -s %[4]s/metrics | grep -E 'loxilb_ai_pd|infergate_datapath_requests'

demo ready. Press Ctrl-C to stop.
`, vip1, vip2, demoModel, apiURL, demoRule1P1D, demoRuleCacheAware)
}

// errDaemonExited: the in-process gateway returned while the demo waited.
var errDaemonExited = errors.New("gateway exited")

// waitHTTP polls url until 200, the daemon exits, or demoStartTimeout.
func waitHTTP(ctx context.Context, hc *http.Client, url string, served <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, demoStartTimeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-served:
			return fmt.Errorf("%w: %v", errDaemonExited, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freeSharedPort finds a port free on every ip (bound then released: a race
// with another process is possible but harmless on a demo).
func freeSharedPort(ips ...string) (int, error) {
	for try := 0; try < 20; try++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			return 0, fmt.Errorf("demo: pick a VIP port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ok := true
		for _, ip := range ips[1:] {
			l2, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			l2.Close()
		}
		ln.Close()
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("demo: no port free on every VIP")
}

// demoEngine is one fake engine process.
type demoEngine struct {
	spec demoEngineSpec
	cmd  *exec.Cmd
	addr string
	done chan struct{} // closed when the process has been waited for
}

// kvPublisherIPs are the engines that publish KV events (they share the
// rule's kvZmqPort, each on its own IP).
func kvPublisherIPs() []string {
	var ips []string
	for _, rs := range demoRules() {
		for _, es := range rs.engines {
			if rs.cacheAware && es.role == "prefill" {
				ips = append(ips, es.ip)
			}
		}
	}
	return ips
}

// startDemoEngine starts `<exe> fake-engine` on spec.ip and reads its
// banner; kvPort > 0 makes it serve /tokenize and publish KV events there.
func startDemoEngine(ctx context.Context, exe string, spec demoEngineSpec, kvPort int, stderr io.Writer) (*demoEngine, error) {
	args := []string{fakeEngineCmdName, "--dialect", demoEngineDialect, "--role", spec.role,
		"--addr", net.JoinHostPort(spec.ip, "0"), "--model", demoModel, "--honor-max-tokens", "--export-metrics"}
	if kvPort > 0 {
		args = append(args, "--kv-zmq-port", strconv.Itoa(kvPort), "--block-size", strconv.Itoa(demoKVBlockSize))
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = stderr
	cmd.SysProcAttr = childProcAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("demo: engine %s pipe: %w", spec.ip, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start engine %s: %w", spec.ip, err)
	}
	e := &demoEngine{spec: spec, cmd: cmd, done: make(chan struct{})}
	banner := make(chan string, 1)
	go func() {
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		banner <- line
		_, _ = io.Copy(io.Discard, br) // keep the pipe drained
		_ = cmd.Wait()
		close(e.done)
	}()
	timer := time.NewTimer(demoStartTimeout)
	defer timer.Stop()
	select {
	case line := <-banner:
		m := bannerAddr.FindStringSubmatch(line)
		if m == nil {
			e.stop(stderr)
			return nil, fmt.Errorf("demo: engine %s (%s) did not start: %q", spec.ip, spec.role, strings.TrimSpace(line))
		}
		e.addr = m[1]
		return e, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	e.stop(stderr)
	return nil, fmt.Errorf("demo: engine %s (%s) printed no banner", spec.ip, spec.role)
}

// stop sends SIGTERM, waits demoStopTimeout, then kills.
func (e *demoEngine) stop(stderr io.Writer) {
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
		return
	case <-time.After(demoStopTimeout):
	}
	fmt.Fprintf(stderr, "demo: engine %s did not stop on SIGTERM; killing it\n", e.addr)
	_ = e.cmd.Process.Kill()
	<-e.done
}

func stopEngines(stderr io.Writer, engines []*demoEngine) {
	for _, e := range engines {
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, e := range engines {
		e.stop(stderr)
	}
}
