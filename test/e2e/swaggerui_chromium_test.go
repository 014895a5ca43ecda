package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testtool"
)

// chromiumPath is Debian's chromium binary.
const chromiumPath = "/usr/bin/chromium"

// chromiumTimeout bounds one headless render, including browser start-up on
// a slow CI box; virtual time makes the page itself settle much faster.
const chromiumTimeout = 90 * time.Second

// requireChromium returns the browser path, skipping outside CI when it is
// not installed. In CI (CI=true) a missing browser is a failure: the UI test
// must run there.
func requireChromium(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		testtool.Missing(t, "%s not installed (Debian package chromium): %v", chromiumPath, err)
	}
	return chromiumPath
}

// dumpDOM renders url in headless chromium and returns the DOM after
// scripts ran. The browser runs in its own process group with a throwaway
// profile; both are removed however the test ends.
func dumpDOM(t *testing.T, browser, url string) string {
	t.Helper()
	return dumpDOMWith(t, browser, url)
}

// dumpDOMWith is dumpDOM with extra browser flags (e.g. a certificate pin).
func dumpDOMWith(t *testing.T, browser, url string, extra ...string) string {
	t.Helper()
	profile := t.TempDir() // removed by the testing package after cleanup
	ctx, cancel := context.WithTimeout(context.Background(), chromiumTimeout)
	defer cancel()
	args := append([]string{
		"--headless",
		"--no-sandbox",
		"--disable-gpu",
		"--disable-quic",
		"--disable-dev-shm-usage",
		"--no-first-run",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-sync",
		"--user-data-dir=" + profile,
		"--virtual-time-budget=15000",
		"--dump-dom",
	}, extra...)
	cmd := exec.CommandContext(ctx, browser, append(args, url)...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Kill the whole group: chromium forks renderer/GPU/zygote helpers that
	// would outlive a plain Process.Kill.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	// Chromium double-forks helpers; make this process their reaper so
	// killed helpers are collected here instead of lingering as zombies
	// under an init that may not reap.
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Logf("PR_SET_CHILD_SUBREAPER: %v (helpers may linger as zombies)", errno)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		// Helpers may linger after the main process exits.
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Logf("kill chromium process group %d: %v", pgid, err)
		}
		reapGroup(pgid)
	})
	err := cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("chromium did not finish within %s; stderr:\n%s", chromiumTimeout, tail(stderr.Bytes()))
	}
	if err != nil {
		t.Fatalf("chromium: %v; stderr:\n%s", err, tail(stderr.Bytes()))
	}
	return stdout.String()
}

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER (not in package
// syscall).
const prSetChildSubreaper = 36

// reapGroup collects exited members of process group pgid, bounded in time.
func reapGroup(pgid int) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.ECHILD) {
			return // nothing left in the group
		}
		if pid <= 0 {
			time.Sleep(20 * time.Millisecond) // members still dying
		}
	}
}

// tail keeps failure output readable: chromium is chatty on stderr.
func tail(b []byte) string {
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
