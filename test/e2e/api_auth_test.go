package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	e2eTokRW  = "e2e-rw-0123456789abcdef0123456789ab"
	e2eTokRO  = "e2e-ro-0123456789abcdef0123456789ab"
	e2eTokNew = "e2e-new-0123456789abcdef0123456789a"
)

// rawCall sends one request the way an attacker's curl would: any Host,
// any Authorization. It returns the status and the error_code.
func rawCall(t *testing.T, base, method, path, host, authz, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		ErrorCode string `json:"error_code"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.ErrorCode
}

func writeTokenFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestAPIAccessBinary drives the built binary as an attacker and as
// operators would: forged Host, no token, wrong token, read-only and
// read-write tokens, raw HTTP and the CLI, then a rotation by SIGHUP.
func TestAPIAccessBinary(t *testing.T) {
	bin := cliBuild(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeTokenFile(t, tokens, "# e2e\nrw:"+e2eTokRW+"  # operator\nro:"+e2eTokRO+"  # dashboard\n")
	d := cliStartDaemon(t, bin, filepath.Join(dir, "state"), "--api-token-file", tokens, "--api-token-reload-interval", "0")
	rule := `{"serviceArguments":{"externalIP":"127.0.0.61","port":18080,"protocol":"tcp","mode":4,"name":"auth-e2e"},` +
		`"endpoints":[{"endpointIP":"127.0.0.62","targetPort":18000,"weight":1}]}`
	lb := "/netlox/v1/config/loadbalancer"
	all := lb + "/all"
	cases := []struct {
		name, method, path, host, authz, body string
		status                                int
		code                                  string
	}{
		{"probe with a foreign Host", "GET", "/readyz", "attacker.example", "", "", 200, ""},
		{"rebinding Host with a valid token", "POST", lb, "attacker.example:11111", "Bearer " + e2eTokRW, rule, 403, "host_not_allowed"},
		{"no token", "POST", lb, "", "", rule, 401, "unauthorized"},
		{"wrong token", "POST", lb, "", "Bearer not-the-token-0123456789abcdef", rule, 401, "unauthorized"},
		{"token without scheme", "GET", all, "", e2eTokRW, "", 401, "unauthorized"},
		{"read-only token writes", "POST", lb, "", "Bearer " + e2eTokRO, rule, 403, "token_read_only"},
		{"read-only token reads", "GET", all, "", "Bearer " + e2eTokRO, "", 200, ""},
		{"metrics need a token", "GET", "/metrics", "", "", "", 401, "unauthorized"},
		{"docs are public", "GET", "/netlox/v1/docs/", "localhost", "", "", 200, ""},
		{"read-write token writes", "POST", lb, "", "Bearer " + e2eTokRW, rule, 200, ""},
		{"anonymous delete-all", "DELETE", all, "", "", "", 401, "unauthorized"},
	}
	for _, tc := range cases {
		status, code := rawCall(t, d.URL, tc.method, tc.path, tc.host, tc.authz, tc.body)
		if status != tc.status || code != tc.code {
			t.Errorf("%s: %d %q, want %d %q", tc.name, status, code, tc.status, tc.code)
		}
	}
	// The rule created by the rw call is still there: no refused call
	// changed anything.
	if out := cliMust(t, bin, d.URL, "get", "lb", "--token", e2eTokRO); !strings.Contains(out, "auth-e2e") {
		t.Fatalf("rule missing: %s", out)
	}

	// CLI: no token → a hint; ro env token cannot delete; rw file can.
	res := cliRun(t, bin, d.URL, "get", "lb")
	if res.Code != 1 || !strings.Contains(res.Stderr, "unauthorized") || !strings.Contains(res.Stderr, "--token-file") {
		t.Fatalf("CLI without token: exit %d stderr %s", res.Code, res.Stderr)
	}
	roEnv := cliRunEnv(t, bin, d.URL, []string{"INFERGATE_TOKEN=" + e2eTokRO}, "delete", "lb", "--name=auth-e2e")
	if roEnv.Code != 1 || !strings.Contains(roEnv.Stderr, "token_read_only") || !strings.Contains(roEnv.Stderr, "rw:") {
		t.Fatalf("CLI ro delete: exit %d stderr %s", roEnv.Code, roEnv.Stderr)
	}
	rwFile := filepath.Join(dir, "my-token")
	writeTokenFile(t, rwFile, e2eTokRW+"\n")
	cliMust(t, bin, d.URL, "delete", "lb", "--name=auth-e2e", "--token-file", rwFile)

	// Rotation with polling off (daemon tests cover polling): step 1 adds
	// the new token, which is not in force until SIGHUP.
	writeTokenFile(t, tokens, "rw:"+e2eTokRW+"\nrw:"+e2eTokNew+"\n")
	if s, _ := rawCall(t, d.URL, "GET", all, "", "Bearer "+e2eTokNew, ""); s != 401 {
		t.Fatalf("token file read without SIGHUP: %d", s)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "new token accepted after SIGHUP", func() bool {
		s, _ := rawCall(t, d.URL, "GET", all, "", "Bearer "+e2eTokNew, "")
		return s == 200
	})
	if s, _ := rawCall(t, d.URL, "GET", all, "", "Bearer "+e2eTokRW, ""); s != 200 {
		t.Fatalf("old token during rotation: %d", s)
	}
	// Step 2: drop the old one.
	writeTokenFile(t, tokens, "rw:"+e2eTokNew+"\n")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "old token refused after SIGHUP", func() bool {
		s, _ := rawCall(t, d.URL, "GET", all, "", "Bearer "+e2eTokRW, "")
		return s == 401
	})
	// A broken edit keeps the tokens in force.
	writeTokenFile(t, tokens, "rw:short\n")
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "reload error logged", func() bool {
		return strings.Contains(d.log.String(), "token file reload failed")
	})
	if s, _ := rawCall(t, d.URL, "GET", all, "", "Bearer "+e2eTokNew, ""); s != 200 {
		t.Fatalf("a broken token file locked the operator out: %d", s)
	}
	select {
	case <-d.done:
		t.Fatal("SIGHUP killed the daemon")
	default:
	}
	logs := d.log.String()
	for _, tok := range []string{e2eTokRW, e2eTokRO, e2eTokNew} {
		if strings.Contains(logs, tok) {
			t.Fatalf("daemon log carries a token")
		}
	}
}

// cliRunEnv is cliRun with extra environment variables.
func cliRunEnv(t *testing.T, bin, server string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliCommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(append(os.Environ(), cliEnvServer+"="+server), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{Stdout: out.String(), Stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestAPIExposureBinary: `serve` on a non-loopback address without a token
// exits 1 before binding, saying what to do; with --insecure-api it goes on
// (here to a listen failure on a TEST-NET address, so no socket is ever
// opened off loopback) after a loud warning.
func TestAPIExposureBinary(t *testing.T) {
	bin := cliBuild(t)
	port := cliFreePort(t)
	run := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), cliCommandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--state-dir", t.TempDir()}, args...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	code, out := run("--api-addr", fmt.Sprintf("0.0.0.0:%d", port))
	if code != 1 || !strings.Contains(out, "refusing to serve the management API") || !strings.Contains(out, "--api-token-file") {
		t.Fatalf("exit %d output %s", code, out)
	}
	// Nothing listened: the port is still free on loopback.
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatalf("refused daemon held the port: %v", err)
	}
	l.Close()
	code, out = run("--api-addr", "192.0.2.1:11111", "--insecure-api")
	if code != 1 || !strings.Contains(out, "INSECURE") || !strings.Contains(out, "listen on") {
		t.Fatalf("--insecure-api: exit %d output %s", code, out)
	}
}
