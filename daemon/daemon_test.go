package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testport"
	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
)

func testLogger() (*logrus.Logger, *safeBuffer) {
	buf := &safeBuffer{}
	l := logrus.New()
	l.SetOutput(buf)
	l.SetFormatter(&logrus.JSONFormatter{})
	return l, buf
}

// running is one in-process daemon on a free loopback port.
type running struct {
	base string
	stop func() error
}

// start runs the daemon until the returned stop is called; it fails the test
// if the daemon does not become ready in time.
func start(t *testing.T, opts Options, log *logrus.Logger) running {
	t.Helper()
	d, exited := launch(t, opts, log)
	// Bounded poll: at most 400 × 25 ms.
	for i := 0; i < 400; i++ {
		if err, ok := exited(); ok {
			t.Fatalf("daemon exited during boot: %v", err)
		}
		if resp, err := http.Get(d.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("daemon not ready within 10s")
	return running{}
}

// launch runs the daemon until the returned stop is called, without waiting
// for it to become ready; exited reports whether Run has returned by itself
// (and its error).
func launch(t *testing.T, opts Options, log *logrus.Logger) (running, func() (error, bool)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.APIListener = ln
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, opts, log) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(15 * time.Second):
			return errors.New("daemon did not stop within 15s")
		}
	}
	t.Cleanup(func() { _ = stop() })
	exited := func() (error, bool) {
		select {
		case err := <-errc:
			stopped = true
			cancel()
			return err, true
		default:
			return nil, false
		}
	}
	return running{base: "http://" + ln.Addr().String(), stop: stop}, exited
}

func listRules(t *testing.T, base string) rules.RuleList {
	t.Helper()
	resp, err := http.Get(base + "/netlox/v1/config/loadbalancer/all")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l rules.RuleList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	return l
}

func names(l rules.RuleList) []string {
	var out []string
	for _, r := range l.LbAttr {
		out = append(out, r.ServiceArguments.Name)
	}
	return out
}

// restRule is a rule whose VIP is a loopback address on port (a
// testport.Free port: the real datapath binds it).
func restRule(port int) string {
	return `{"serviceArguments":{"externalIP":"127.0.0.61","port":` + strconv.Itoa(port) + `,"protocol":"tcp","mode":4,"name":"persisted"},
 "endpoints":[{"endpointIP":"127.0.0.71","targetPort":8000,"weight":1}]}`
}

// createPersisted creates restRule's rule "persisted" through the API at
// base and fails the test unless it is answered 200.
func createPersisted(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Post(base+"/netlox/v1/config/loadbalancer", "application/json", strings.NewReader(restRule(testport.Free(t))))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
}

// TestRestartKeepsRules: a rule created over the API survives a restart on
// the same state dir (write-through + boot replay).
func TestRestartKeepsRules(t *testing.T) {
	log, _ := testLogger()
	opts := DefaultOptions()
	opts.StateDir = filepath.Join(t.TempDir(), "state") // Run must create it

	d := start(t, opts, log)
	createPersisted(t, d.base)
	if err := d.stop(); err != nil {
		t.Fatalf("first run: %v", err)
	}
	if fi, err := os.Stat(opts.StateDir); err != nil || fi.Mode().Perm() != stateDirMode {
		t.Fatalf("state dir: %v, mode %v; want %o", err, fi.Mode().Perm(), stateDirMode)
	}

	d2 := start(t, opts, log)
	if got := names(listRules(t, d2.base)); len(got) != 1 || got[0] != "persisted" {
		t.Fatalf("rules after restart = %v, want [persisted]", got)
	}
	if err := d2.stop(); err != nil {
		t.Fatalf("second run: %v", err)
	}
}

const ruleFileTemplate = `apiVersion: netlox/v1
kind: Loadbalancer
metadata:
  name: from-file
spec:
  serviceArguments:
    externalIP: 127.0.0.62
    port: PORT1
    protocol: tcp
    mode: 4
  endpoints:
    - {endpointIP: 127.0.0.72, targetPort: 8000, weight: 1}
---
apiVersion: netlox/v1
kind: Loadbalancer
metadata:
  name: rejected
spec:
  serviceArguments:
    externalIP: 127.0.0.63
    port: PORT2
    protocol: tcp
    mode: 4
    pd_disagg_mode: true
  endpoints:
    - {endpointIP: 127.0.0.73, targetPort: 8000, weight: 1}
`

// TestRuleFiles: declarative rules are applied after replay, a rejected one
// is logged with its source and skipped, and re-applying on restart
// (Unchanged) is not an error.
func TestRuleFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	ruleFile := strings.NewReplacer("PORT1", strconv.Itoa(testport.Free(t)),
		"PORT2", strconv.Itoa(testport.Free(t))).Replace(ruleFileTemplate)
	if err := os.WriteFile(path, []byte(ruleFile), 0o600); err != nil {
		t.Fatal(err)
	}
	log, logs := testLogger()
	opts := DefaultOptions()
	opts.StateDir = filepath.Join(dir, "state")
	opts.RulesPath = path

	for run := 1; run <= 2; run++ {
		d := start(t, opts, log)
		if got := names(listRules(t, d.base)); len(got) != 1 || got[0] != "from-file" {
			t.Fatalf("run %d: rules = %v, want [from-file]; log:\n%s", run, got, logs.String())
		}
		if err := d.stop(); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
	rejected := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "file rule rejected") {
			rejected++
			if !strings.Contains(line, `"source":"`+path+`#2"`) || !strings.Contains(line, `"error":`) {
				t.Errorf("rejection line lacks source or error: %s", line)
			}
		}
	}
	if rejected != 2 {
		t.Errorf("logged %d rejections over two runs, want 2:\n%s", rejected, logs.String())
	}
	// Boot order is the contract: listen first (so writes see 503 during
	// replay), then replay, then rule files.
	out := logs.String()
	listen, replay, file := strings.Index(out, "management API listening"),
		strings.Index(out, "persisted rules replayed"), strings.Index(out, "file rule created")
	if listen < 0 || replay < 0 || file < 0 || !(listen < replay && replay < file) {
		t.Errorf("boot log order listen=%d replay=%d file=%d, want listen < replay < file:\n%s", listen, replay, file, out)
	}
}

func TestBootFailures(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"missing rules path", func(o *Options) { o.RulesPath = filepath.Join(dir, "nope.yaml") }, "load rule files"},
		{"state dir is a file", func(o *Options) { o.StateDir = filepath.Join(blocker, "state") }, "create state dir"},
		{"bad listen address", func(o *Options) { o.APIAddr = "127.0.0.1:notaport" }, "listen on"},
		// Management API over TLS: bad material fails boot naming the file.
		{"api cert missing", func(o *Options) {
			o.APITLSCert, o.APITLSKey = filepath.Join(dir, "api.crt"), filepath.Join(dir, "api.key")
		}, filepath.Join(dir, "api.crt") + ": certificate file does not exist"},
		{"api key without cert", func(o *Options) { o.APITLSKey = filepath.Join(dir, "api.key") }, "--api-tls-cert and --api-tls-key go together"},
		{"api client CA without cert", func(o *Options) { o.APITLSClientCA = blocker }, "--api-tls-client-ca needs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log, _ := testLogger()
			opts := DefaultOptions()
			opts.StateDir = filepath.Join(t.TempDir(), "state")
			opts.APIAddr = "127.0.0.1:0"
			tc.mutate(&opts)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			err := Run(ctx, opts, log)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want error containing %q", err, tc.want)
			}
		})
	}
}
