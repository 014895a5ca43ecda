package cli_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
)

// TestRegisterLabelsAndBootstrapPort: `infergate register` carries a
// static endpoint's labels and a vLLM Mooncake prefill's bootstrap_port
// into the registry and `get engines` shows both; a label or a bootstrap
// port a static endpoint could not have is refused (exit 2, naming the
// field) before anything is written.
func TestRegisterLabelsAndBootstrapPort(t *testing.T) {
	c := etcdtest.Start(t, 1)
	store := c.URL("/clireg")
	noEnv := cli.Env{Getenv: func(string) string { return "" }}
	args := func(role string, extra ...string) []string {
		return append([]string{"register", "--store", store, "--url", "http://10.0.0.5:8000", "--role", role,
			"--engine", "vllm", "--model", "m", "--kv-connector", "MooncakeConnector", "--bootstrap-port", "8999",
			"--ttl", "5s"}, extra...)
	}

	for _, tc := range []struct {
		name  string
		args  []string
		field string
	}{
		{"label key with a space", args("prefill", "--label", "my zone=a"), "labels.my zone"},
		{"bootstrap port on a decode", args("decode"), "bootstrap_port"},
	} {
		if res := runEnv(t, noEnv, tc.args...); res.code != 2 || !strings.Contains(res.stderr, tc.field+":") {
			t.Fatalf("%s: exit %d, stderr %q; want 2 naming %s", tc.name, res.code, res.stderr, tc.field)
		}
	}
	if res := runEnv(t, noEnv, "get", "engines", "--store", store); strings.Contains(res.stdout, "10.0.0.5") {
		t.Fatalf("a refused registration was written:\n%s", res.stdout)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, args("prefill", "--label", "kv_engine_id=e-1", "--label", "zone=a"),
			cli.Env{Stdout: &out, Stderr: &errb, Getenv: noEnv.Getenv})
	}()
	var list result
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		list = runEnv(t, noEnv, "get", "engines", "--store", store)
		if strings.Contains(list.stdout, "10.0.0.5:8000") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("never listed; register: %q %q; get engines: %+v", out.String(), errb.String(), list)
		}
	}
	lines := strings.Split(strings.TrimSpace(list.stdout), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[1]), " ") !=
		"10.0.0.5:8000 prefill vllm m kv_connector=MooncakeConnector 8999 kv_engine_id=e-1,zone=a ok" {
		t.Fatalf("get engines:\n%s", list.stdout)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("register exited %d: %s", code, errb.String())
	}
}

// syncBuffer is a bytes.Buffer a running command writes while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
