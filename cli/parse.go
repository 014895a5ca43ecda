package cli

import (
	"strconv"
	"strings"

	"github.com/infergate/infergate/rules"
)

// Mode and selector names, as loxicmd spells them.
const (
	modeFullProxy     = 4
	modeFullProxyName = "fullproxy"
	protoTCP          = "tcp"
)

// selectorNames maps loxicmd's --select names to sel values.
func selectorNames() map[string]int {
	return map[string]int{
		"rr": 0, "hash": 1, "priority": 2, "persist": 3, "lc": 4,
		"n2": 5, "n3": 6, "chwbl": 8, "gpuaware": 9, "wrr-hash": 10, "chwbl-wrr": 10,
	}
}

// selName is the display name of a sel value.
func selName(sel int) string {
	switch sel {
	case 0:
		return "rr"
	case 1:
		return "hash"
	case 2:
		return "priority"
	case 3:
		return "persist"
	case 4:
		return "lc"
	case 5:
		return "n2"
	case 6:
		return "n3"
	case 8:
		return "chwbl"
	case 9:
		return "gpuaware"
	case 10:
		return "wrr-hash"
	}
	return strconv.Itoa(sel)
}

// modeName is the display name of a mode value.
func modeName(mode int) string {
	switch mode {
	case 0:
		return "default"
	case 1:
		return "onearm"
	case 2:
		return "fullnat"
	case 3:
		return "dsr"
	case 4:
		return "fullproxy"
	case 5:
		return "hostonearm"
	}
	return strconv.Itoa(mode)
}

// roleName is the display name of an ep_role value.
func roleName(role int) string {
	switch role {
	case 0:
		return "normal"
	case 1:
		return "prefill"
	case 2:
		return "decode"
	}
	return strconv.Itoa(role)
}

// parseSelect turns --select into a sel value (a name or a number; the
// server validates numbers).
func parseSelect(s string) (int, error) {
	if v, ok := selectorNames()[strings.ToLower(s)]; ok {
		return v, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		return n, nil
	}
	return 0, usagef("--select %q is not a selector (want rr|hash|priority|persist|lc|chwbl|gpuaware|wrr-hash)", s)
}

// parseMode accepts only fullproxy: it is the only mode infergate serves,
// and saying so here beats a server error about mode numbers.
func parseMode(s string) (int, error) {
	if strings.EqualFold(s, modeFullProxyName) || s == strconv.Itoa(modeFullProxy) {
		return modeFullProxy, nil
	}
	return 0, usagef("--mode %q is not served: infergate is an L7 proxy and only serves --mode=fullproxy", s)
}

// parseRole turns one --ep-role item into an ep_role value.
func parseRole(s string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "normal", "any", "0":
		return 0, nil
	case "prefill", "1":
		return 1, nil
	case "decode", "2":
		return 2, nil
	}
	return 0, usagef("endpoint role '%s' is invalid (want normal|prefill|decode or 0|1|2)", s)
}

// portSpec is a parsed --tcp value: <port>[-<portmax>][:<targetPort>].
type portSpec struct {
	port, portMax, target int
}

// parsePortSpec reads --tcp. A missing target port means the service port.
// Numbers are passed through for the server to range-check.
func parsePortSpec(s string) (portSpec, error) {
	svc, target, hasTarget := strings.Cut(s, ":")
	lo, hi, hasRange := strings.Cut(svc, "-")
	var ps portSpec
	var err error
	if ps.port, err = strconv.Atoi(lo); err != nil {
		return ps, usagef("--tcp %q: service port %q is not a number (want <port>[-<portmax>]:<targetPort>)", s, lo)
	}
	if hasRange {
		if ps.portMax, err = strconv.Atoi(hi); err != nil {
			return ps, usagef("--tcp %q: port max %q is not a number", s, hi)
		}
	}
	ps.target = ps.port
	if hasTarget {
		if ps.target, err = strconv.Atoi(target); err != nil {
			return ps, usagef("--tcp %q: target port %q is not a number", s, target)
		}
	}
	return ps, nil
}

// parseEndpoint reads one --endpoints item "<ip>:<weight>". The weight is
// split at the last ':' so IPv6 works ("fd00::1:2" is fd00::1 weight 2);
// "[fd00::1]:2" and "[fd00::1]" work too. An IPv4 address without weight
// means weight 1. The server validates the address.
func parseEndpoint(s string) (ip string, weight int, err error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, usagef("--endpoints item %q: missing ']'", s)
		}
		ip, rest := s[1:end], s[end+1:]
		if rest == "" {
			return ip, 1, nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", 0, usagef("--endpoints item %q: want [<ipv6>]:<weight>", s)
		}
		s = ip + rest
	} else if !strings.Contains(s, ":") {
		return s, 1, nil
	}
	i := strings.LastIndex(s, ":")
	ip = s[:i]
	if weight, err = strconv.Atoi(s[i+1:]); err != nil {
		return "", 0, usagef("--endpoints item %q: weight %q is not a number (want <ip>:<weight>)", s, s[i+1:])
	}
	if ip == "" {
		return "", 0, usagef("--endpoints item %q: missing IP", s)
	}
	return ip, weight, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// endpointFlags are the per-endpoint flags, index-aligned with --endpoints.
type endpointFlags struct {
	endpoints string
	roles     string
	nixlPorts string
	backups   string
}

// build returns the endpoints with roles, NIXL ports and backup marks.
func (f endpointFlags) build(target int) ([]rules.Endpoint, error) {
	items := splitList(f.endpoints)
	if len(items) == 0 {
		return nil, usagef("--endpoints is required (<ip>:<weight>,…)")
	}
	eps := make([]rules.Endpoint, len(items))
	for i, it := range items {
		ip, w, err := parseEndpoint(it)
		if err != nil {
			return nil, err
		}
		eps[i] = rules.Endpoint{EndpointIP: ip, TargetPort: target, Weight: w}
	}
	if roles := splitList(f.roles); len(roles) > 0 {
		if len(roles) != len(eps) {
			return nil, usagef("--ep-role count (%d) must match --endpoints count (%d)", len(roles), len(eps))
		}
		for i, r := range roles {
			v, err := parseRole(r)
			if err != nil {
				return nil, err
			}
			eps[i].EPRole = v
		}
	}
	if ports := splitList(f.nixlPorts); len(ports) > 0 {
		if len(ports) != len(eps) {
			return nil, usagef("--nixl-port count (%d) must match --endpoints count (%d)", len(ports), len(eps))
		}
		for i, p := range ports {
			v, err := strconv.Atoi(p)
			if err != nil {
				return nil, usagef("--nixl-port item %q is not a number", p)
			}
			eps[i].NixlPort = v
		}
	}
	for _, b := range splitList(f.backups) {
		found := false
		for i := range eps {
			if sameIP(eps[i].EndpointIP, b) {
				eps[i].Backup, found = true, true
			}
		}
		if !found {
			return nil, usagef("--backup %q is not one of --endpoints", b)
		}
	}
	return eps, nil
}

func sameIP(a, b string) bool {
	pa, okA := rules.ParseIPLiteral(a)
	pb, okB := rules.ParseIPLiteral(b)
	if !okA || !okB {
		return a == b
	}
	return pa == pb
}
