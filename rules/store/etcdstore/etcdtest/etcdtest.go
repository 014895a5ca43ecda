// Package etcdtest starts real etcd servers (Debian's etcd-server) on
// loopback for tests: free ports, a temporary data directory per member,
// every process killed when the test ends.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Binary is the etcd server looked up on PATH.
const Binary = "etcd"

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	dataDir   string
	args      []string
	mu        sync.Mutex
	cmd       *exec.Cmd
	logPath   string
}

// Cluster is a set of members started together.
type Cluster struct {
	t       testing.TB
	Members []*Member
}

// Start runs an n-member cluster and waits until it has a leader. It skips
// the test (with the reason) when the etcd binary is not installed.
func Start(t testing.TB, n int) *Cluster { t.Helper(); return StartOn(t, n, "127.0.0.1") }

// StartOn is Start with every member listening on host (a loopback or a
// test-created interface address).
func StartOn(t testing.TB, n int, host string) *Cluster {
	t.Helper()
	return StartWith(t, n, Config{Host: host})
}

// Config selects where members listen and whether clients must use TLS.
type Config struct {
	Host string // listen address, default 127.0.0.1
	// With CertFile/KeyFile set, the client URLs are https; with CAFile
	// also set, members require client certificates signed by it.
	CertFile, KeyFile, CAFile string
}

// StartWith starts n members as cfg says.
func StartWith(t testing.TB, n int, cfg Config) *Cluster {
	t.Helper()
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	clientScheme := "http://"
	if cfg.CertFile != "" {
		clientScheme = "https://"
	}
	if _, err := exec.LookPath(Binary); err != nil {
		t.Skipf("etcd server binary %q not found (apt-get install etcd-server): %v", Binary, err)
	}
	dir := t.TempDir()
	c := &Cluster{t: t}
	var initial []string
	taken := map[string]bool{}
	for i := 0; i < n; i++ {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: clientScheme + freeAddr(t, host, taken),
			PeerURL:   "http://" + freeAddr(t, host, taken),
			dataDir:   filepath.Join(dir, fmt.Sprintf("m%d", i)),
			logPath:   filepath.Join(dir, fmt.Sprintf("m%d.log", i)),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		m.args = []string{
			"--name", m.Name, "--data-dir", m.dataDir,
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "infergate-test",
			"--heartbeat-interval", "50", "--election-timeout", "500",
			"--logger", "zap", "--log-outputs", m.logPath, "--log-level", "warn",
		}
		if cfg.CertFile != "" {
			m.args = append(m.args, "--cert-file", cfg.CertFile, "--key-file", cfg.KeyFile)
			if cfg.CAFile != "" {
				m.args = append(m.args, "--trusted-ca-file", cfg.CAFile, "--client-cert-auth")
			}
		}
		if err := m.start(); err != nil {
			c.Stop()
			t.Fatalf("start etcd %s: %v", m.Name, err)
		}
	}
	t.Cleanup(c.Stop)
	if cfg.CertFile == "" {
		c.WaitHealthy(t, 15*time.Second)
	}
	return c
}

// freeAddr returns a free address on host that is not in taken, and
// adds it: a port probed and closed may be handed out again at once (one
// cluster once got the same port for two members).
func freeAddr(t testing.TB, host string, taken map[string]bool) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		if !taken[addr] {
			taken[addr] = true
			return addr
		}
	}
	t.Fatal("free port: only ports already taken came back")
	return ""
}

func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cmd := exec.Command(Binary, m.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	m.cmd = cmd
	go func() { _ = cmd.Wait() }()
	return nil
}

// Kill stops the member at once (SIGKILL), as a crash would.
func (m *Member) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
		m.cmd = nil
	}
}

// Restart starts a killed member again on its data directory and ports.
func (m *Member) Restart() error {
	for i := range m.args {
		if m.args[i] == "new" {
			m.args[i] = "existing"
		}
	}
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger briefly
		if err = m.start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Endpoints are the members' client addresses (host:port).
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = strings.TrimPrefix(strings.TrimPrefix(m.ClientURL, "http://"), "https://")
	}
	return out
}

// URL is the --store value for this cluster with prefix.
func (c *Cluster) URL(prefix string) string {
	return "etcd://" + strings.Join(c.Endpoints(), ",") + prefix
}

// Client is a plain etcd client for the test to write or inspect keys.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// EnableAuth turns etcd's authentication on with a root user (the root
// role may read and write every key) whose password is written to a file,
// as --etcd-password-file takes it; it returns that file.
func (c *Cluster) EnableAuth(t testing.TB, password string) string {
	t.Helper()
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.UserAdd(ctx, "root", password); err != nil {
		t.Fatalf("etcd user add root: %v", err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatalf("etcd grant root: %v", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatalf("etcd auth enable: %v", err)
	}
	return PasswordFile(t, password)
}

// PasswordFile writes password to a new file, as --etcd-password-file
// reads it, and returns its path.
func PasswordFile(t testing.TB, password string) string {
	t.Helper()
	pw := filepath.Join(t.TempDir(), "etcd-password")
	if err := os.WriteFile(pw, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return pw
}

// WaitHealthy waits until a linearizable read succeeds (a leader exists).
func (c *Cluster) WaitHealthy(t testing.TB, within time.Duration) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer cli.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := cli.Get(ctx, "health-check")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd cluster not healthy after %s: %v\n%s", within, err, c.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) logs() string {
	var b strings.Builder
	for _, m := range c.Members {
		data, _ := os.ReadFile(m.logPath)
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		fmt.Fprintf(&b, "--- %s ---\n%s\n", m.Name, data)
	}
	return b.String()
}

// Stop kills every member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.Kill()
	}
}
