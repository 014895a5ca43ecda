package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBinary builds pdfake, runs it as a vLLM decode on an ephemeral
// loopback port, serves one request and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "pdfake")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "--dialect", "vllm", "--role", "decode", "--addr", "127.0.0.1:0")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read banner: %v", err)
	}
	m := regexp.MustCompile(`addr=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("banner without addr: %q", line)
	}
	post := func(path, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+m[1]+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if status, body := post("/admin/inject?fault=500", ""); status != http.StatusNoContent {
		t.Fatalf("inject: %d %s", status, body)
	}
	if status, _ := post("/v1/completions", `{"prompt":"p"}`); status != 500 {
		t.Errorf("injected fault not applied: %d", status)
	}
	if status, body := post("/v1/completions", `{"prompt":"p"}`); status != 200 || !strings.Contains(body, "Hello from the fake vLLM decode, the answer is 42.") {
		t.Errorf("got %d: %s", status, body)
	}
	resp, err := http.Get("http://" + m[1] + "/admin/records")
	if err != nil {
		t.Fatal(err)
	}
	var recs []struct {
		Body  string `json:"body"`
		Fault string `json:"fault"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&recs); err != nil || len(recs) != 2 || recs[0].Fault != "500" || recs[1].Body != `{"prompt":"p"}` {
		t.Errorf("records = %+v (%v)", recs, err)
	}
	resp.Body.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("pdfake exited with %v after SIGTERM", err)
	}
}
