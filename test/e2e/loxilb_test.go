package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/rules"
)

// TestLoxiLBUserFlow checks the built binary as a LoxiLB user would use it:
// loxicmd's command lines (-s/-p), the body loxicmd sends ("BGP"/"Monitor"),
// a secondary VIP, LoxiLB's GET words and counters, adminStateUp, save --lb
// / apply --lb, GET → POST round trip, and that it all survives a restart.
func TestLoxiLBUserFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := cliBuild(t)
	state := t.TempDir()
	d := cliStartDaemon(t, bin, state)
	u, _ := url.Parse(d.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	loxi := func(args ...string) []string { return append([]string{"-s", host, "-p", port}, args...) }
	e, err := fakeengine.Start(fakeengine.Options{Name: "e1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ePort := e.Addr()[strings.LastIndexByte(e.Addr(), ':')+1:]
	vipPort := cliFreePort(t)
	hc := &http.Client{Timeout: cliCommandTimeout}

	// 1. loxicmd's create lb line, verbatim apart from the binary's name.
	cliMust(t, bin, "", loxi("create", "lb", "127.0.0.40", fmt.Sprintf("--tcp=%d:%s", vipPort, ePort),
		"--mode=fullproxy", "--monitor", "--name=loxi-e2e", "--endpoints=127.0.0.1:1")...)
	// 2. The body loxicmd's client sends, with a secondary VIP added.
	body := fmt.Sprintf(`{"serviceArguments":{"externalIP":"127.0.0.41","port":%d,"protocol":"tcp","sel":0,"mode":4,`+
		`"BGP":false,"Monitor":true,"probetype":"http","inactiveTimeOut":0,"block":0,"proxyprotocolv2":false,"egress":false,"name":"loxi-e2e2",`+
		`"annotations":{"octaviaProtocol":"HTTP"}},"secondaryIPs":null,"allowedSources":null,`+
		`"secondaryVIPs":[{"address":"127.0.0.42","subnetId":"s-1"}],`+
		`"endpoints":[{"endpointIP":"127.0.0.1","targetPort":%s,"weight":1,"state":"","counter":"","urlPath":"/health","expectedCodes":"200-204"}]}`,
		vipPort, ePort)
	postRule(t, hc, d.URL, []byte(body), http.StatusOK)

	send := func(vip string) (int, string) {
		resp, err := hc.Post(fmt.Sprintf("http://%s:%d/v1/completions", vip, vipPort), "application/json",
			strings.NewReader(`{"model":"fake-model","prompt":"hi","max_tokens":2}`))
		if err != nil {
			t.Fatalf("POST via %s: %v", vip, err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Infergate-Error")
	}
	eventually(t, cliReadyTimeout, "both rules active", func() bool {
		a, _ := send("127.0.0.40")
		b, _ := send("127.0.0.42")
		return a == 200 && b == 200
	})

	// 3. GET reads like LoxiLB's.
	list := cliListRules(t, bin, d.URL)
	if len(list) != 2 {
		t.Fatalf("%d rules, want 2", len(list))
	}
	for _, r := range list {
		sa := r.ServiceArguments
		if sa.AdminStateUp == nil || !*sa.AdminStateUp || sa.InactiveTimeOut != 240 || sa.BackendProtocol != "http1" {
			t.Errorf("%s: GET lacks LoxiLB's effective fields: %+v", sa.ExternalIP, sa)
		}
		ep := r.Endpoints[0]
		n, _, ok := strings.Cut(ep.Counter, ":")
		reqs, _ := strconv.Atoi(n)
		if ep.State != "active" || ep.Health != "active" || !ok || reqs < 1 {
			t.Errorf("%s: endpoint state %q health %q counter %q", sa.ExternalIP, ep.State, ep.Health, ep.Counter)
		}
	}

	// 4. Our GET re-POSTs unchanged: LoxiLB's identical re-POST (409).
	for _, r := range list {
		b, _ := json.Marshal(r)
		postRule(t, hc, d.URL, b, http.StatusConflict)
	}

	// 5. adminStateUp false: kept, answers 503 admin_down on every address.
	var down rules.Rule
	for _, r := range list {
		if r.ServiceArguments.ExternalIP == "127.0.0.41" {
			down = r
		}
	}
	f := false
	down.ServiceArguments.AdminStateUp = &f
	b, _ := json.Marshal(down)
	postRule(t, hc, d.URL, b, http.StatusOK)
	for _, vip := range []string{"127.0.0.41", "127.0.0.42"} {
		if code, ec := send(vip); code != 503 || ec != "admin_down" {
			t.Errorf("admin down via %s: %d %q", vip, code, ec)
		}
	}

	// 6. save --lb, delete, apply --lb: everything back, all fields kept.
	dir := t.TempDir()
	cliMust(t, bin, "", loxi("save", "--lb", "-c", dir)...)
	cliMust(t, bin, "", loxi("delete", "lb", "--name=loxi-e2e")...)
	cliMust(t, bin, "", loxi("delete", "lb", "--name=loxi-e2e2")...)
	if n := len(cliListRules(t, bin, d.URL)); n != 0 {
		t.Fatalf("%d rules after delete", n)
	}
	out := cliMust(t, bin, "", loxi("apply", "--lb", filepath.Join(dir, "lbconfig.txt"))...)
	if strings.Count(out, "created") != 2 {
		t.Fatalf("apply --lb: %s", out)
	}

	// 7. A restart keeps it all.
	d.Stop(t)
	d2 := cliStartDaemon(t, bin, state)
	got := cliListRules(t, bin, d2.URL)
	var kept *rules.Rule
	for i := range got {
		if got[i].ServiceArguments.ExternalIP == "127.0.0.41" {
			kept = &got[i]
		}
	}
	if kept == nil || kept.ServiceArguments.AdminStateUp == nil || *kept.ServiceArguments.AdminStateUp ||
		len(kept.SecondaryVIPs) != 1 || kept.SecondaryVIPs[0].SubnetID != "s-1" ||
		kept.ServiceArguments.Annotations["octaviaProtocol"] != "HTTP" || kept.Endpoints[0].ExpectedCodes != "200-204" {
		t.Fatalf("after save/apply --lb and restart: %+v", kept)
	}
	if code, ec := send("127.0.0.42"); code != 503 || ec != "admin_down" {
		t.Errorf("after restart via secondary VIP: %d %q", code, ec)
	}

	// 8. LoxiLB's own loxicmd, when installed, reads our GET.
	loxicmd, err := exec.LookPath("loxicmd")
	if err != nil {
		t.Log("loxicmd not on PATH (go install github.com/loxilb-io/loxicmd@latest is not available from the module proxy); skipping the real-loxicmd checks")
		return
	}
	u2, _ := url.Parse(d2.URL)
	h2, p2, _ := net.SplitHostPort(u2.Host)
	for _, args := range [][]string{{"get", "lb"}, {"get", "lb", "-o", "wide"}, {"get", "lb", "-o", "json"}} {
		cmd := exec.Command(loxicmd, append([]string{"-s", h2, "-p", p2}, args...)...)
		outb, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(outb, []byte("127.0.0.41")) {
			t.Errorf("loxicmd %v: %v\n%s", args, err, outb)
		}
	}
}

func postRule(t *testing.T, hc *http.Client, base string, body []byte, want int) {
	t.Helper()
	resp, err := hc.Post(base+"/netlox/v1/config/loadbalancer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("POST: %d %s, want %d\nbody: %s", resp.StatusCode, b, want, body)
	}
}

// configOnly strips a `get lb -o json` answer down to configuration: the
// runtime fields (status, endpoint state, health and LoxiLB's counter,
// which counts real traffic) change with every request.
func configOnly(t *testing.T, getJSON string) string {
	t.Helper()
	var list rules.RuleList
	if err := json.Unmarshal([]byte(getJSON), &list); err != nil {
		t.Fatalf("get lb -o json: %v\n%s", err, getJSON)
	}
	for i := range list.LbAttr {
		r := &list.LbAttr[i]
		r.Status = nil
		for j := range r.Endpoints {
			r.Endpoints[j].State, r.Endpoints[j].Health, r.Endpoints[j].Counter, r.Endpoints[j].EngineLoad = "", "", "", ""
		}
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
