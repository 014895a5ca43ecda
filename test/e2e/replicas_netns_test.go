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

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/internal/testtool"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
)

// Three gateway replicas, each in its own network namespace as separate
// hosts would be, all serving the same VIP, sharing rules through a
// 3-member etcd. The host reaches replica i's VIP through policy routing on
// source address 10.213.i.1; engines listen on 10.213.1.1 and etcd on
// 10.213.9.1 (a second address of the first host veth), so one replica can be cut off from
// etcd alone by a blackhole route in its namespace.
const (
	rnNet      = "10.213"
	rnVIP      = rnNet + ".0.100"
	rnReplicas = 3
	rnAPIPort  = 11111
)

const rnEtcdIP = rnNet + ".9.1"

func rnHostIP(i int) string    { return fmt.Sprintf("%s.%d.1", rnNet, i) }
func rnReplicaIP(i int) string { return fmt.Sprintf("%s.%d.2", rnNet, i) }

// rnIP runs one `ip` command, failing the test on error.
func rnIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// rnTopology builds the namespaces, veths and routes, removed at cleanup.
// It skips when network namespaces cannot be created here.
func rnTopology(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		testtool.Missing(t, "network namespaces need root")
	}
	testtool.Require(t, "ip", "iproute2")
	tag := fmt.Sprintf("%d", os.Getpid()%100000)
	probe := "ig15p" + tag
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		testtool.Missing(t, "cannot create a network namespace here: %v %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
	rnLockTopology(t)
	rnRemoveStale()
	var names []string
	for i := 1; i <= rnReplicas; i++ {
		ns, host, peer := fmt.Sprintf("ig15r%d-%s", i, tag), fmt.Sprintf("ig%sh%d", tag, i), fmt.Sprintf("ig%sn%d", tag, i)
		table := fmt.Sprintf("%d", 21300+i)
		// A previous topology of this process (another test) is gone only
		// once its veth is: namespace deletion frees it asynchronously.
		_ = exec.Command("ip", "link", "del", host).Run()
		rnIP(t, "netns", "add", ns)
		t.Cleanup(func() {
			_ = exec.Command("ip", "rule", "del", "from", rnHostIP(i), "table", table).Run()
			_ = exec.Command("ip", "route", "flush", "table", table).Run()
			_ = exec.Command("ip", "link", "del", host).Run() // the pair, synchronously
			_ = exec.Command("ip", "netns", "del", ns).Run()
		})
		rnIP(t, "link", "add", host, "type", "veth", "peer", "name", peer)
		rnIP(t, "link", "set", peer, "netns", ns)
		rnIP(t, "addr", "add", rnHostIP(i)+"/24", "dev", host)
		rnIP(t, "link", "set", host, "up")
		if i == 1 { // etcd's own address, on a veth this test owns
			rnIP(t, "addr", "add", rnEtcdIP+"/32", "dev", host)
		}
		rnIP(t, "-n", ns, "addr", "add", rnReplicaIP(i)+"/24", "dev", peer)
		rnIP(t, "-n", ns, "link", "set", peer, "up")
		rnIP(t, "-n", ns, "link", "set", "lo", "up")
		rnIP(t, "-n", ns, "addr", "add", rnVIP+"/32", "dev", "lo")
		rnIP(t, "-n", ns, "route", "add", "default", "via", rnHostIP(i))
		rnIP(t, "route", "add", rnVIP+"/32", "via", rnReplicaIP(i), "dev", host, "table", table)
		rnIP(t, "rule", "add", "from", rnHostIP(i), "table", table)
		names = append(names, ns)
	}
	return names
}

// rnLockFile serialises the topology between test processes on one host:
// its addresses, routing tables and rules are fixed, so two runs at once
// (two checkouts' suites) would take each other's routes.
const rnLockFile = "/tmp/infergate-e2e-netns.lock"

// rnLockTopology holds rnLockFile until the test ends, waiting at most five
// minutes for another process's run. The lock dies with its holder, so a
// run killed mid-test (a suite timeout) leaves no lock behind.
func rnLockTopology(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(rnLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("netns topology lock: %v", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			f.Close()
			t.Fatalf("netns topology lock held by another run for 5 minutes: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}

// rnRemoveStale removes what a killed run left: while the lock is held no
// live run owns any of it (namespaces named ig15r*, links holding an
// address of rnNet, the policy rules and tables of the replicas).
func rnRemoveStale() {
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "ig15r") {
				_ = exec.Command("ip", "netns", "del", f[0]).Run()
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "addr", "show", "to", rnNet+".0.0/16").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				link, _, _ := strings.Cut(f[1], "@")
				_ = exec.Command("ip", "link", "del", link).Run()
			}
		}
	}
	for i := 1; i <= rnReplicas; i++ {
		table := fmt.Sprintf("%d", 21300+i)
		for range 10 { // one rule per killed run; bounded
			if exec.Command("ip", "rule", "del", "from", rnHostIP(i), "table", table).Run() != nil {
				break
			}
		}
		_ = exec.Command("ip", "route", "flush", "table", table).Run()
	}
}

// rnReplica is one `infergate serve` inside a namespace.
type rnReplica struct {
	ns, api string
	cmd     *exec.Cmd
	log     *cliSyncBuffer
	done    chan struct{}
	client  *http.Client // reaches the VIP in this replica's namespace
}

func rnStart(t *testing.T, bin, ns string, i int, store, tokenFile string) *rnReplica {
	t.Helper()
	r := &rnReplica{ns: ns, api: fmt.Sprintf("http://%s:%d", rnReplicaIP(i), rnAPIPort), log: &cliSyncBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command("ip", "netns", "exec", ns, bin, "serve",
		"--api-addr", fmt.Sprintf("%s:%d", rnReplicaIP(i), rnAPIPort), "--state-dir", t.TempDir(),
		"--store", store, "--replica-id", fmt.Sprintf("r%d", i), "--log-level", "info",
		// Off loopback, the management API needs a credential.
		"--api-token-file", tokenFile)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	src := &net.TCPAddr{IP: net.ParseIP(rnHostIP(i))}
	r.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: src, Timeout: 2 * time.Second}).DialContext}}
	t.Cleanup(func() {
		r.kill()
		if t.Failed() {
			t.Logf("replica %s log:\n%s", ns, r.log.String())
		}
	})
	return r
}

func (r *rnReplica) kill() {
	if r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
	}
}

func rnGet(c *http.Client, url string) (int, string) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func rnPost(c *http.Client, url, body string) (int, http.Header, string) {
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// rnToken is the replicas' management API token (their API listens on the
// namespace's address, not loopback).
const rnToken = "netns-replicas-0123456789abcdef"

// rnTokenFile writes the replicas' token file.
func rnTokenFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(f, []byte("rw:"+rnToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// rnBearer adds the token to management API requests.
type rnBearer struct{ base http.RoundTripper }

func (b rnBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+rnToken)
	return b.base.RoundTrip(r)
}

func rnRuleURL(api string, port int) string {
	return fmt.Sprintf("%s/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp", api, rnVIP, port)
}

// TestReplicasInNetns: rules written through each replica are served by all
// three; one conversation lands on the same prefill whichever replica it
// hits; with etcd down every replica keeps serving, says degraded and
// refuses writes with 503 store_unavailable; after recovery writes work and
// reach all replicas; a replica killed mid-write leaves the others agreeing.
func TestReplicasInNetns(t *testing.T) {
	nss := rnTopology(t)
	bin := cliBuild(t)
	etcd := etcdtest.StartOn(t, 3, rnEtcdIP)
	store := etcd.URL("/netns")
	p0, p1 := affFake(t, rnHostIP(1), pdfake.Prefill), affFake(t, rnHostIP(1), pdfake.Prefill)
	d0 := affFake(t, rnHostIP(1), pdfake.Decode)
	tokenFile := rnTokenFile(t)
	reps := make([]*rnReplica, rnReplicas)
	for i := range reps {
		reps[i] = rnStart(t, bin, nss[i], i+1, store, tokenFile)
	}
	api := &http.Client{Timeout: 5 * time.Second, Transport: rnBearer{http.DefaultTransport}}
	for _, r := range reps {
		eventually(t, 30*time.Second, "replica "+r.ns+" ready", func() bool {
			st, _ := rnGet(api, r.api+"/readyz")
			return st == 200
		})
	}

	// 1. A rule written through each replica reaches all three.
	const port = 8080
	for w, r := range reps {
		rport := port + w
		start := time.Now()
		body := affRuleJSON(fmt.Sprintf("netns%d", w), rnVIP, rport, true, []*pdfake.Engine{p0, p1}, []*pdfake.Engine{d0})
		if st, _, b := rnPost(api, r.api+"/netlox/v1/config/loadbalancer", body); st != 200 {
			t.Fatalf("POST through %s: %d %s", r.ns, st, b)
		}
		for _, o := range reps {
			eventually(t, 10*time.Second, "rule on "+o.ns, func() bool {
				st, _ := rnGet(api, rnRuleURL(o.api, rport))
				return st == 200
			})
		}
		t.Logf("rule written through %s served by all replicas' APIs %v after the POST", r.ns, time.Since(start).Round(time.Millisecond))
	}
	for _, r := range reps {
		eventually(t, 20*time.Second, "VIP serving in "+r.ns, func() bool {
			st, _, _ := rnPost(r.client, fmt.Sprintf("http://%s:%d/v1/chat/completions", rnVIP, port), affChatBody("sys", "warm-up"))
			return st == 200
		})
	}

	// 2. One conversation, one prefill, whichever replica it hits.
	consistent := 0
	const conversations = 20
	for c := range conversations {
		var chosen []int
		for _, r := range reps {
			before := affCounts(p0, p1)
			body, _ := json.Marshal(map[string]any{"model": "fake-model", "max_tokens": 4, "user": fmt.Sprintf("conversation-%d", c),
				"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("turn of conversation %d", c)}}})
			if st, _, b := rnPost(r.client, fmt.Sprintf("http://%s:%d/v1/chat/completions", rnVIP, port), string(body)); st != 200 {
				t.Fatalf("conversation %d via %s: %d %s", c, r.ns, st, b)
			}
			after := affCounts(p0, p1)
			which := -1
			for k := range after {
				if after[k] > before[k] {
					which = k
				}
			}
			chosen = append(chosen, which)
		}
		if chosen[0] >= 0 && chosen[0] == chosen[1] && chosen[1] == chosen[2] {
			consistent++
		}
	}
	t.Logf("session consistency across %d replicas: %d/%d conversations on one prefill", rnReplicas, consistent, conversations)
	if consistent != conversations {
		t.Fatalf("only %d of %d conversations landed on the same prefill on every replica", consistent, conversations)
	}

	// 3. get replicas: all three, one rule set.
	var out []byte
	eventually(t, 10*time.Second, "get replicas to list three agreeing replicas", func() bool {
		var err error
		out, err = exec.Command(bin, "get", "replicas", "--store", store).CombinedOutput()
		if err != nil || strings.Count(string(out), "\nr") != rnReplicas {
			return false
		}
		// Every replica reports the three rules written above.
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		for _, l := range lines[1 : 1+rnReplicas] {
			if f := strings.Fields(l); len(f) < 5 || f[4] != "3" {
				return false
			}
		}
		return true
	})
	t.Logf("get replicas:\n%s", out)
	// The same listing through a replica's API (GET …/replicas): no etcd
	// address or credentials on the operator's side.
	viaAPI, err := exec.Command(bin, "get", "replicas", "--server", reps[0].api, "--token", rnToken).CombinedOutput()
	if err != nil || strings.Count(string(viaAPI), "\nr") != rnReplicas || !strings.Contains(string(viaAPI), "replicas serve the same rules") {
		t.Fatalf("get replicas --server %s: %v\n%s", reps[0].api, err, viaAPI)
	}

	// 4. One replica partitioned from etcd (engines still reachable): it
	// keeps serving, says degraded, refuses writes; the others take writes;
	// healed, it catches up without a restart.
	// Both directions: the replica's packets to etcd, and etcd's packets to
	// the replica (an established watch would otherwise still deliver).
	rnIP(t, "-n", nss[1], "route", "add", "blackhole", rnEtcdIP+"/32")
	rnIP(t, "rule", "add", "from", rnEtcdIP, "to", rnReplicaIP(2), "blackhole", "priority", "100")
	healed := false
	t.Cleanup(func() {
		if !healed {
			_ = exec.Command("ip", "rule", "del", "from", rnEtcdIP, "to", rnReplicaIP(2), "blackhole", "priority", "100").Run()
		}
	})
	eventually(t, 15*time.Second, "the partitioned replica to report degraded", func() bool {
		_, b := rnGet(api, reps[1].api+"/readyz")
		return strings.Contains(b, "degraded: store unreachable")
	})
	partBody := affRuleJSON("partition", rnVIP, port+20, true, []*pdfake.Engine{p0}, []*pdfake.Engine{d0})
	if st, _, b := rnPost(api, reps[0].api+"/netlox/v1/config/loadbalancer", partBody); st != 200 {
		t.Fatalf("write through a connected replica during the partition: %d %s", st, b)
	}
	if st, _, b := rnPost(api, reps[1].api+"/netlox/v1/config/loadbalancer", affRuleJSON("p2", rnVIP, port+21, true, []*pdfake.Engine{p0}, []*pdfake.Engine{d0})); st != 503 {
		t.Fatalf("write through the partitioned replica: %d %s, want 503", st, b)
	}
	if st, _, b := rnPost(reps[1].client, fmt.Sprintf("http://%s:%d/v1/chat/completions", rnVIP, port), affChatBody("sys", "partitioned")); st != 200 {
		t.Fatalf("VIP of the partitioned replica: %d %s", st, b)
	}
	if st, _ := rnGet(api, rnRuleURL(reps[1].api, port+20)); st != 404 {
		t.Fatalf("partitioned replica has a rule written during the partition: %d", st)
	}
	rnIP(t, "-n", nss[1], "route", "del", "blackhole", rnEtcdIP+"/32")
	rnIP(t, "rule", "del", "from", rnEtcdIP, "to", rnReplicaIP(2), "blackhole", "priority", "100")
	healed = true
	eventually(t, 20*time.Second, "the healed replica to catch up", func() bool {
		st, _ := rnGet(api, rnRuleURL(reps[1].api, port+20))
		return st == 200
	})

	// 5. etcd down: serving continues, degraded, writes 503.
	for _, m := range etcd.Members {
		m.Kill()
	}
	for _, r := range reps {
		eventually(t, 15*time.Second, r.ns+" to report degraded", func() bool {
			_, b := rnGet(api, r.api+"/readyz")
			return strings.Contains(b, "degraded: store unreachable")
		})
		if st, _, b := rnPost(r.client, fmt.Sprintf("http://%s:%d/v1/chat/completions", rnVIP, port), affChatBody("sys", "during outage")); st != 200 {
			t.Fatalf("VIP in %s during the etcd outage: %d %s", r.ns, st, b)
		}
		body := affRuleJSON("outage", rnVIP, port+10, true, []*pdfake.Engine{p0}, []*pdfake.Engine{d0})
		st, h, b := rnPost(api, r.api+"/netlox/v1/config/loadbalancer", body)
		if st != 503 || !strings.Contains(b, "store_unavailable") || h.Get("Retry-After") == "" {
			t.Fatalf("write through %s during the outage: %d %q Retry-After=%q", r.ns, st, b, h.Get("Retry-After"))
		}
	}
	for _, m := range etcd.Members {
		if err := m.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	etcd.WaitHealthy(t, 30*time.Second)
	for _, r := range reps {
		eventually(t, 15*time.Second, r.ns+" ready again", func() bool {
			_, b := rnGet(api, r.api+"/readyz")
			return strings.Contains(b, `"ready"`)
		})
	}
	body := affRuleJSON("after", rnVIP, port+10, true, []*pdfake.Engine{p0}, []*pdfake.Engine{d0})
	if st, _, b := rnPost(api, reps[1].api+"/netlox/v1/config/loadbalancer", body); st != 200 {
		t.Fatalf("write after recovery: %d %s", st, b)
	}
	for _, o := range reps {
		eventually(t, 10*time.Second, "post-recovery rule on "+o.ns, func() bool {
			st, _ := rnGet(api, rnRuleURL(o.api, port+10))
			return st == 200
		})
	}

	// 6. A replica killed mid-write: the others agree with etcd.
	body = affRuleJSON("midwrite", rnVIP, port+11, true, []*pdfake.Engine{p1}, []*pdfake.Engine{d0})
	go func() { rnPost(api, reps[2].api+"/netlox/v1/config/loadbalancer", body) }()
	time.Sleep(2 * time.Millisecond)
	reps[2].kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := etcd.Client(t).Get(ctx, "/netns/rules/"+fmt.Sprintf("%s:%d|tcp", rnVIP, port+11))
	if err != nil {
		t.Fatal(err)
	}
	inEtcd := len(resp.Kvs) == 1
	for _, o := range reps[:2] {
		want := 404
		if inEtcd {
			want = 200
		}
		eventually(t, 10*time.Second, fmt.Sprintf("%s to agree with etcd (rule present: %v)", o.ns, inEtcd), func() bool {
			st, _ := rnGet(api, rnRuleURL(o.api, port+11))
			return st == want
		})
	}
	t.Logf("write interrupted by the replica's death: committed=%v; surviving replicas agree", inEtcd)
}
