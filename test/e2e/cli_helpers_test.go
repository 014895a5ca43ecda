package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testport"
)

// Bounds of the CLI end-to-end helpers. Every wait is bounded so a broken
// daemon fails the test instead of hanging it.
const (
	cliBuildTimeout   = 5 * time.Minute
	cliReadyTimeout   = 30 * time.Second
	cliCommandTimeout = 30 * time.Second
	cliStopTimeout    = 15 * time.Second
	cliPollInterval   = 50 * time.Millisecond
	cliEnvServer      = "INFERGATE_SERVER"
	cliReadyPath      = "/readyz"
)

// cliRepoRoot is the module root, two levels above this package.
func cliRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	return root
}

// cliBuild builds the real infergate binary into a test temp dir.
func cliBuild(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "infergate")
	ctx, cancel := context.WithTimeout(context.Background(), cliBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/infergate")
	cmd.Dir = cliRepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/infergate: %v\n%s", err, out)
	}
	return bin
}

// cliSyncBuffer is a bytes.Buffer safe for the exec copier goroutine and
// the test reading it.
type cliSyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *cliSyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *cliSyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cliDaemon is one `infergate serve` subprocess.
type cliDaemon struct {
	URL    string
	cmd    *exec.Cmd
	log    *cliSyncBuffer
	done   chan struct{} // closed when the process has exited
	waitMu sync.Mutex
	err    error
	hc     *http.Client // readiness client (HTTPS daemons); nil: plain
}

// eventually polls cond until it holds, failing t after within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cliFreePort returns a port that was free a moment ago, outside the
// kernel's ephemeral range (testport.Free). The daemon binds it by
// address; a lost race shows up as an early exit and cliStartDaemon
// retries with another port.
func cliFreePort(t *testing.T) int {
	t.Helper()
	return testport.Free(t)
}

// cliStartDaemon starts `infergate serve` on a free loopback port with
// stateDir and waits until /readyz answers 200. The process is stopped
// when the test ends.
func cliStartDaemon(t *testing.T, bin, stateDir string, extra ...string) *cliDaemon {
	t.Helper()
	return cliStartDaemonNofile(t, bin, stateDir, 0, extra...)
}

// cliStartDaemonNofile is cliStartDaemon with the daemon's descriptor
// limit set to nofile (0: inherited), for tests that exhaust descriptors.
func cliStartDaemonNofile(t *testing.T, bin, stateDir string, nofile int, extra ...string) *cliDaemon {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		d, err := cliLaunch(t, bin, stateDir, cliFreePort(t), nil, nofile, extra...)
		if err == nil {
			return d
		}
		lastErr = err
	}
	t.Fatalf("daemon did not become ready: %v", lastErr)
	return nil
}

// cliTryStart starts `infergate serve` on port with extra daemon flags and
// waits for /readyz.
func cliTryStart(t *testing.T, bin, stateDir string, port int, extra ...string) (*cliDaemon, error) {
	return cliTryStartTLS(t, bin, stateDir, port, nil, extra...)
}

// cliTryStartTLS is cliTryStart for a daemon whose API serves HTTPS
// (--api-tls-cert in extra) when hc is set: readiness is polled with hc.
func cliTryStartTLS(t *testing.T, bin, stateDir string, port int, hc *http.Client, extra ...string) (*cliDaemon, error) {
	return cliLaunch(t, bin, stateDir, port, hc, 0, extra...)
}

// cliLaunch starts the daemon and waits for /readyz. With nofile > 0 it
// runs under `ulimit -n nofile`: dash and bash set both the soft and the
// hard limit, so the Go runtime cannot raise it back, and the shell execs
// the binary, so the process signalled and inspected is the daemon.
func cliLaunch(t *testing.T, bin, stateDir string, port int, hc *http.Client, nofile int, extra ...string) (*cliDaemon, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	d := &cliDaemon{URL: "http://" + addr, log: &cliSyncBuffer{}, done: make(chan struct{}), hc: hc}
	if hc != nil {
		d.URL = "https://" + addr
	}
	args := append([]string{"serve", "--api-addr", addr, "--state-dir", stateDir, "--log-level", "info"}, extra...)
	d.cmd = exec.Command(bin, args...)
	if nofile > 0 {
		d.cmd = exec.Command("sh", append([]string{"-c", `ulimit -n ` + strconv.Itoa(nofile) + ` && exec "$0" "$@"`, bin}, args...)...)
	}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start daemon: %w", err)
	}
	go func() {
		err := d.cmd.Wait()
		d.waitMu.Lock()
		d.err = err
		d.waitMu.Unlock()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.Stop(t)
		if t.Failed() {
			t.Logf("daemon %s log:\n%s", addr, d.log.String())
		}
	})
	if err := d.waitReady(); err != nil {
		d.Stop(t)
		return nil, fmt.Errorf("%w\n%s", err, d.log.String())
	}
	return d, nil
}

func (d *cliDaemon) waitReady() error {
	hc := d.hc
	if hc == nil {
		hc = &http.Client{Timeout: time.Second}
	}
	deadline := time.Now().Add(cliReadyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			return errors.New("daemon exited before it was ready")
		default:
		}
		resp, err := hc.Get(d.URL + cliReadyPath)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(cliPollInterval)
	}
	return fmt.Errorf("not ready after %v", cliReadyTimeout)
}

// Kill sends SIGKILL (a crash: no shutdown path runs) and waits for exit.
// It returns an error instead of failing t so any goroutine may call it.
func (d *cliDaemon) Kill() error {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-d.done:
		return nil
	case <-time.After(cliStopTimeout):
		return errors.New("daemon did not exit after SIGKILL")
	}
}

// Stop terminates the daemon gracefully (SIGTERM), then forcibly.
func (d *cliDaemon) Stop(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(cliStopTimeout):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("daemon ignored SIGTERM for %v", cliStopTimeout)
	}
}

// cliResult is one CLI invocation's outcome.
type cliResult struct {
	Code           int
	Stdout, Stderr string
}

// cliRun runs the binary against server with args.
func cliRun(t *testing.T, bin, server string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliCommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), cliEnvServer+"="+server)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
	default:
		t.Fatalf("run infergate %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// cliMust runs the CLI and fails the test unless it exits 0.
func cliMust(t *testing.T, bin, server string, args ...string) string {
	t.Helper()
	res := cliRun(t, bin, server, args...)
	if res.Code != 0 {
		t.Fatalf("infergate %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
	}
	return res.Stdout
}
