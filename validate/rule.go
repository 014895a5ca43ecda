package validate

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/rules"
)

// LoxiLB's mode 4 is fullproxy, the only mode an L7 gateway serves.
const modeFullProxy = 4

// Compiled-view role names (api.CompiledEndpoint.Role).
const (
	rolePrefill = "prefill"
	roleDecode  = "decode"
)

// Management API paths the workflow reads beyond the client's.
const (
	pathMetrics     = "/metrics"
	pathLBKeyFmt    = "/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/%s"
	suffixStatus    = "/status"
	pathKVInventory = "/netlox/v1/config/ai/kv/inventory"
)

// compiledView is the part of GET …/compiled the workflow reads.
type compiledView struct {
	Name string `json:"name"`
	Key  struct {
		VIP       string `json:"vip"`
		Port      uint16 `json:"port"`
		Protocol  string `json:"protocol"`
		Host      string `json:"host"`
		ModelName string `json:"model_name"`
	} `json:"key"`
	SSE    bool   `json:"sse"`
	Engine string `json:"engine"`
	// CircuitBreaker: the rule's endpoints have breakers (cb_enable; always
	// on P/D rules).
	CircuitBreaker bool `json:"circuit_breaker"`
	Probe          struct {
		Type    string `json:"type"`
		Request string `json:"request"`
	} `json:"probe"`
	PD *struct {
		CacheAware     bool `json:"cache_aware"`
		CacheThreshold int  `json:"cache_threshold"`
	} `json:"pd"`
	KV *struct {
		Mode      int     `json:"mode"`
		BlockSize int     `json:"block_size"`
		HashAlgo  string  `json:"hash_algo"`
		ZMQPort   uint16  `json:"zmq_port"`
		WarmupSec float64 `json:"warmup_sec"`
	} `json:"kv"`
	Endpoints []compiledEndpoint `json:"endpoints"`
}

type compiledEndpoint struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Weight  int    `json:"weight"`
	Role    string `json:"role"`
	Backup  bool   `json:"backup"`
}

// statusView is GET …/status.
type statusView struct {
	Ready     bool                     `json:"ready"`
	Reason    string                   `json:"reason"`
	Endpoints map[string]endpointState `json:"endpoints"`
}

// endpointState is one endpoint's entry in GET …/status.
type endpointState struct {
	State   string `json:"state"`
	Breaker string `json:"breaker"`
}

func (c *compiledView) isPD() bool    { return c.PD != nil }
func (c *compiledView) kvExact() bool { return c.KV != nil && c.KV.Mode > 0 }

// byRole returns the endpoints serving role (weight > 0).
func (c *compiledView) byRole(role string) []compiledEndpoint {
	var out []compiledEndpoint
	for _, e := range c.Endpoints {
		if e.Role == role && e.Weight > 0 {
			out = append(out, e)
		}
	}
	return out
}

// findRule resolves target: a rule name, or VIP:port with an optional
// /protocol (tcp by default).
func findRule(ctx context.Context, api *client.Client, target string) (rules.Rule, error) {
	all, err := api.List(ctx)
	if err != nil {
		return rules.Rule{}, fmt.Errorf("list rules: %w", err)
	}
	vip, port, proto, isAddr := parseAddrTarget(target)
	if !isAddr {
		return findByName(all, target)
	}
	for _, r := range all {
		sa := r.ServiceArguments
		if isAddr && sa.Port == port && strings.EqualFold(sa.Protocol, proto) {
			if a, err := netip.ParseAddr(sa.ExternalIP); err == nil && a.Unmap() == vip {
				return r, nil
			}
		}
	}
	return rules.Rule{}, errNoRule{target: target, rules: len(all)}
}

// findByName is the one rule named name. Names are not keys: two rules may
// share one, and validating whichever comes first would report on a rule
// the operator did not mean, so several matches are an error naming them.
func findByName(all []rules.Rule, name string) (rules.Rule, error) {
	var found []rules.Rule
	for _, r := range all {
		if r.ServiceArguments.Name == name {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		return rules.Rule{}, errNoRule{target: name, rules: len(all)}
	case 1:
		return found[0], nil
	}
	refs := make([]string, len(found))
	for i, r := range found {
		sa := r.ServiceArguments
		refs[i] = net.JoinHostPort(sa.ExternalIP, strconv.Itoa(sa.Port)) + "/" + sa.Protocol
	}
	return rules.Rule{}, errAmbiguousName{name: name, refs: refs}
}

// errAmbiguousName: several rules carry the name validate was given.
type errAmbiguousName struct {
	name string
	refs []string // VIP:port/protocol of each
}

func (e errAmbiguousName) Error() string {
	return fmt.Sprintf("%d rules are named %q (%s): validate one by VIP:port[/protocol]", len(e.refs), e.name, strings.Join(e.refs, ", "))
}

// errNoRule: the API answered, and no rule matches the target.
type errNoRule struct {
	target string
	rules  int
}

func (e errNoRule) Error() string {
	return fmt.Sprintf("no rule %q among %d rules (by name, or VIP:port[/protocol])", e.target, e.rules)
}

func parseAddrTarget(t string) (vip netip.Addr, port int, proto string, ok bool) {
	proto = "tcp"
	if i := strings.LastIndexByte(t, '/'); i > 0 {
		t, proto = t[:i], strings.ToLower(t[i+1:])
	}
	host, p, err := net.SplitHostPort(t)
	if err != nil {
		return netip.Addr{}, 0, "", false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, 0, "", false
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return netip.Addr{}, 0, "", false
	}
	return a.Unmap(), n, proto, true
}

// ruleLabel is the rule's metric label as the datapath sets it: its name,
// or, when unnamed, the string of the key the rule compiles to (which also
// carries block, host, path and model when set, so it is taken from
// rules.KeyOf rather than rebuilt here).
func ruleLabel(r rules.Rule) string {
	if name := r.ServiceArguments.Name; name != "" {
		return name
	}
	k, err := rules.KeyOf(r)
	if err != nil { // not a rule the server accepted: no series carry it
		return r.ServiceArguments.ExternalIP
	}
	return k.String()
}

// keyPath is the management path of r's key.
func keyPath(r rules.Rule) string {
	sa := r.ServiceArguments
	return fmt.Sprintf(pathLBKeyFmt, sa.ExternalIP, sa.Port, strings.ToLower(sa.Protocol))
}

// getJSON GETs server+path into out; a 404 is reported as found=false.
func getJSON(ctx context.Context, hc *http.Client, url string, out any) (found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return false, fmt.Errorf("GET %s: decode: %w", url, err)
	}
	return true, nil
}
