package daemon

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"context"
)

const (
	daemonTokOld = "old-token-0123456789abcdef012345"
	daemonTokNew = "new-token-0123456789abcdef012345"
)

func getWith(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// waitStatus polls url until it answers want (bounded: 10 s).
func waitStatus(t *testing.T, url, token string, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := getWith(t, url, token)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status %d, want %d", what, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startWithTokens runs a daemon on a token file holding the old token.
func startWithTokens(t *testing.T, interval time.Duration) (running, string, *safeBuffer) {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	replaceFile(t, tokens, "rw:"+daemonTokOld+"\n")
	log, buf := testLogger()
	opts := DefaultOptions()
	opts.StateDir = t.TempDir()
	opts.Auth.TokenFile = tokens
	opts.Auth.ReloadInterval = interval
	d := start(t, opts, log)
	list := d.base + "/netlox/v1/config/loadbalancer/all"
	if got := getWith(t, list, ""); got != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", got)
	}
	if got := getWith(t, list, daemonTokOld); got != http.StatusOK {
		t.Fatalf("old token: %d, want 200", got)
	}
	return d, tokens, buf
}

func checkLogClean(t *testing.T, d running, buf *safeBuffer, trigger string) {
	t.Helper()
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, daemonTokOld) || strings.Contains(out, daemonTokNew) {
		t.Fatal("a token reached the log")
	}
	if !strings.Contains(out, "API tokens reloaded") || !strings.Contains(out, `"trigger":"`+trigger+`"`) {
		t.Fatalf("no %s reload log line:\n%s", trigger, out)
	}
}

// TestTokenRotationByFileChange: with polling on and no signal, a rotation
// written to the file takes effect (add the new token, then drop the old).
func TestTokenRotationByFileChange(t *testing.T) {
	d, tokens, buf := startWithTokens(t, 20*time.Millisecond)
	list := d.base + "/netlox/v1/config/loadbalancer/all"
	replaceFile(t, tokens, "rw:"+daemonTokOld+"\nrw:"+daemonTokNew+"\n")
	waitStatus(t, list, daemonTokNew, http.StatusOK, "new token after a file change")
	if got := getWith(t, list, daemonTokOld); got != http.StatusOK {
		t.Fatalf("old token during rotation: %d", got)
	}
	replaceFile(t, tokens, "rw:"+daemonTokNew+"\n")
	waitStatus(t, list, daemonTokOld, http.StatusUnauthorized, "old token after it left the file")
	checkLogClean(t, d, buf, "file_change")
}

// TestTokenRotationBySIGHUP: with polling off, a changed file is not read
// until SIGHUP, which reloads it (and changes a token's kind).
func TestTokenRotationBySIGHUP(t *testing.T) {
	d, tokens, buf := startWithTokens(t, 0)
	list := d.base + "/netlox/v1/config/loadbalancer/all"
	replaceFile(t, tokens, "ro:"+daemonTokNew+"\n")
	if got := getWith(t, list, daemonTokNew); got != http.StatusUnauthorized {
		t.Fatalf("file read without SIGHUP or polling: new token %d", got)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, list, daemonTokOld, http.StatusUnauthorized, "old token after SIGHUP")
	if got := getWith(t, list, daemonTokNew); got != http.StatusOK {
		t.Fatalf("new ro token may read: %d", got)
	}
	resp, err := http.Post(d.base+"/netlox/v1/config/loadbalancer", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("anonymous write after SIGHUP: %d", resp.StatusCode)
	}
	checkLogClean(t, d, buf, "sighup")
}

// TestExposureRefusal: off loopback without a token the daemon refuses to
// start (before binding anything); --insecure-api lets it go on, loudly.
func TestExposureRefusal(t *testing.T) {
	// 192.0.2.1 (TEST-NET-1) is not a local address: once the refusal is
	// passed, the listen fails, so no socket is ever opened off loopback.
	for _, tc := range []struct {
		addr     string
		insecure bool
		want     string
	}{
		{"0.0.0.0:0", false, "--insecure-api"},
		{"192.0.2.1:0", false, "refusing to serve the management API"},
		{"192.0.2.1:0", true, "listen on"},
	} {
		log, buf := testLogger()
		opts := DefaultOptions()
		opts.StateDir = filepath.Join(t.TempDir(), "state")
		opts.APIAddr = tc.addr
		opts.Auth.Insecure = tc.insecure
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := Run(ctx, opts, log)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s insecure=%v: Run = %v, want %q", tc.addr, tc.insecure, err, tc.want)
		}
		if !tc.insecure {
			if _, serr := os.Stat(opts.StateDir); serr == nil {
				t.Errorf("%s: refused daemon created its state dir", tc.addr)
			}
		} else if !strings.Contains(buf.String(), "INSECURE") {
			t.Errorf("--insecure-api without a loud warning:\n%s", buf.String())
		}
	}
}

// TestStateDirModes: the state directory is 0700 and its files 0600, even
// when an older install left them wider.
func TestStateDirModes(t *testing.T) {
	parent := t.TempDir()
	fresh := filepath.Join(parent, "a", "state")
	log, _ := testLogger()
	opts := DefaultOptions()
	opts.StateDir = fresh
	d := start(t, opts, log)
	body := `{"serviceArguments":{"externalIP":"127.0.0.1","port":1,"protocol":"tcp","mode":4,"name":"m"},` +
		`"endpoints":[{"endpointIP":"127.0.0.1","targetPort":2,"weight":1}]}`
	resp, err := http.Post(d.base+"/netlox/v1/config/loadbalancer", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	checkMode(t, fresh, 0o700)
	if resp.StatusCode == http.StatusOK {
		checkMode(t, filepath.Join(fresh, "rules.json"), 0o600)
	}

	// An existing, too-open directory and state file are tightened.
	old := filepath.Join(parent, "old")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "rules.json"), []byte(`{"schema_version":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	opts.StateDir = old
	start(t, opts, log).stop()
	checkMode(t, old, 0o700)
	entries, err := os.ReadDir(old)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		checkMode(t, filepath.Join(old, e.Name()), 0o600)
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s mode %v, want %v", path, got, want)
	}
}
