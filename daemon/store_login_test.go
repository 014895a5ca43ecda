package daemon

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testport"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
)

// launchWithEtcdUser starts a daemon on c with --etcd-user root and the
// password in pwFile, without waiting for it to become ready.
func launchWithEtcdUser(t *testing.T, c *etcdtest.Cluster, pwFile string) (running, func() (error, bool), *safeBuffer) {
	t.Helper()
	log, buf := testLogger()
	opts := DefaultOptions()
	opts.StateDir = t.TempDir()
	opts.Store = c.URL("/login")
	opts.ReplicaID = "a"
	opts.Etcd.Username, opts.Etcd.PasswordFile = "root", pwFile
	opts.Etcd.DialTimeout = 500 * time.Millisecond
	d, exited := launch(t, opts, log)
	return d, exited, buf
}

// answer is one bounded request to a daemon that may not serve yet.
func answer(method, url, body string) (int, http.Header, string) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// waitNotReady waits until /readyz answers 503 not_ready naming reason, and
// fails at once if the daemon exits instead.
func waitNotReady(t *testing.T, d running, exited func() (error, bool), reason string) {
	t.Helper()
	waitFor(t, "readyz 503 not_ready saying "+reason, func() bool {
		if err, ok := exited(); ok {
			t.Fatalf("daemon exited instead of waiting not-ready: %v", err)
		}
		st, _, body := answer(http.MethodGet, d.base+"/readyz", "")
		return st == http.StatusServiceUnavailable && strings.Contains(body, `"not_ready"`) && strings.Contains(body, reason)
	})
}

// TestEtcdLoginWaitsForEtcd: with an etcd user, a replica started while
// etcd is down (its login cannot finish within the dial timeout) does not
// exit: /readyz and writes answer 503 not_ready saying the store is not
// reached yet, and it becomes ready once etcd is back.
func TestEtcdLoginWaitsForEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1)
	pw := c.EnableAuth(t, "s3cret")
	c.Members[0].Kill()
	d, exited, _ := launchWithEtcdUser(t, c, pw)
	waitNotReady(t, d, exited, "rule store: etcd not reached yet")
	time.Sleep(2 * time.Second) // several logins time out meanwhile (dial timeout 500 ms)
	if err, ok := exited(); ok {
		t.Fatalf("daemon exited while etcd was down: %v", err)
	}
	st, h, body := answer(http.MethodPost, d.base+"/netlox/v1/config/loadbalancer", restRule(testport.Free(t)))
	if st != http.StatusServiceUnavailable || !strings.Contains(body, `"not_ready"`) || !strings.Contains(body, "rule store:") || h.Get("Retry-After") == "" {
		t.Fatalf("write while etcd is down: %d %s Retry-After=%q", st, body, h.Get("Retry-After"))
	}
	if err := c.Members[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "readyz 200 once etcd is back", func() bool {
		st, _, _ := answer(http.MethodGet, d.base+"/readyz", "")
		return st == http.StatusOK
	})
	if st, _, body := answer(http.MethodPost, d.base+"/netlox/v1/config/loadbalancer", restRule(testport.Free(t))); st != http.StatusOK {
		t.Fatalf("write once ready: %d %s", st, body)
	}
}

// TestEtcdLoginRefused: with a wrong password the replica stays up and not
// ready, /readyz says the authentication failed, the refusal is logged at
// error, and the password never appears in the log.
func TestEtcdLoginRefused(t *testing.T) {
	const wrong = "wrong-Pa55-7f3e"
	c := etcdtest.Start(t, 1)
	c.EnableAuth(t, "s3cret")
	pw := etcdtest.PasswordFile(t, wrong)
	d, exited, buf := launchWithEtcdUser(t, c, pw)
	waitNotReady(t, d, exited, "rule store: etcd authentication failed for user")
	if err := d.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	logs := buf.String()
	if !strings.Contains(logs, `"level":"error"`) || !strings.Contains(logs, "etcd refused the login") {
		t.Errorf("the refused login is not logged at error:\n%s", logs)
	}
	if strings.Contains(logs, wrong) {
		t.Errorf("the password is in the log:\n%s", logs)
	}
}
