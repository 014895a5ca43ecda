package framingdiff

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/internal/testport"
	"github.com/infergate/infergate/internal/testtool"
	"github.com/infergate/infergate/spec"
)

// The test's loopback addresses (one block, so it never meets another
// package's listeners).
const (
	ipNginx    = "127.0.6.2"
	ipLean     = "127.0.6.3"
	ipNetHTTP  = "127.0.6.4"
	ipEngines  = "127.0.6.10"
	nginxStart = 10 * time.Second
)

// nginxPath finds the nginx binary (Debian puts it in /usr/sbin, which a
// user's PATH may lack).
func nginxPath(t *testing.T) string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	testtool.Missing(t, "nginx not installed (Debian package nginx-light): the framing differential needs real nginx beside infergate")
	return ""
}

// startNginx runs nginx as the benches configure it (test/bench/nginxconf.sh:
// HTTP/1.1 keep-alive to the engine, no response buffering) in front of
// engine, on ipNginx, and returns its address. The client timeouts are
// short so a shape that leaves nginx waiting for bytes ends quickly.
func startNginx(t *testing.T, engine string) string {
	t.Helper()
	bin := nginxPath(t)
	dir := t.TempDir()
	port := testport.Free(t)
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers read the temp directory this test owns
	}
	conf := fmt.Sprintf(`%s
worker_processes 1;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
daemon off;
events { worker_connections 512; }
http {
  access_log off;
  client_body_temp_path %[2]s/body;
  proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fastcgi;
  uwsgi_temp_path %[2]s/uwsgi;
  scgi_temp_path %[2]s/scgi;
  client_header_timeout 3s;
  client_body_timeout 3s;
  keepalive_timeout 10s;
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_buffering off;
  proxy_read_timeout 10s;
  upstream engine { server %[3]s; keepalive 16; }
  server {
    listen %[4]s:%[5]d;
    location / { proxy_pass http://engine; }
  }
}
`, user, dir, engine, ipNginx, port)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) // master and its worker
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	addr := net.JoinHostPort(ipNginx, strconv.Itoa(port))
	deadline := time.Now().Add(nginxStart)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return addr
		}
		select {
		case err := <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %v\n%s%s", err, out, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s within %v", addr, nginxStart)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startInfergate runs a datapath Runtime with the given plaintext front end
// (the code the daemon runs, in process) with one round-robin rule on ip
// sending to engine, and returns the rule's address.
func startInfergate(t *testing.T, frontEnd, ip, engine string) string {
	t.Helper()
	o := datapath.DefaultOptions()
	o.HTTPFrontEnd = frontEnd
	rt := datapath.New(o, nil, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("close %s runtime: %v", frontEnd, err)
		}
	})
	port := testport.Free(t)
	ap := netip.MustParseAddrPort(engine)
	r := &spec.Rule{
		Key:         spec.Key{VIP: netip.MustParseAddr(ip), Port: uint16(port), Protocol: "tcp"},
		Name:        "framingdiff-" + frontEnd,
		Generation:  1,
		Selector:    spec.SelRoundRobin,
		Probe:       spec.Probe{Type: "none"},
		IdleTimeout: 10 * time.Second,
		Endpoints:   []spec.Endpoint{{ID: ap.String(), Addr: ap, Weight: 1}},
	}
	if err := rt.Install(nil, r); err != nil {
		t.Fatalf("install rule on %s front end: %v", frontEnd, err)
	}
	return r.Key.ListenAddr().String()
}

// answers is what the client read back on a shape's connection.
type answers struct {
	codes  []int
	closed bool // the server closed (else it went quiet)
}

func (a answers) String() string {
	s := fmt.Sprint(a.codes)
	if a.closed {
		return s + " closed"
	}
	return s + " open"
}

// exchange writes raw on a fresh connection to addr and reads responses
// until the server closes or stays quiet for quiet (a shorter wait once
// the expected number of answers came). The write may fail when the
// server refuses early and closes; what it answered is still read.
func exchange(addr, raw string, expect int, quiet time.Duration) (answers, error) {
	var a answers
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return a, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.WriteString(c, raw)
	br := bufio.NewReader(c)
	end := time.Now().Add(4 * quiet)
	for time.Now().Before(end) {
		wait := quiet
		if expect > 0 && len(a.codes) >= expect {
			wait = quiet / 4
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			a.closed = !(errors.As(err, &ne) && ne.Timeout())
			return a, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode >= 200 {
			a.codes = append(a.codes, resp.StatusCode)
		}
	}
	return a, nil
}
