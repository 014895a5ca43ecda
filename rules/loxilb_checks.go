package rules

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// Validation and compilation of the LoxiLB-only fields:
// adminStateUp, annotations, secondaryVIPs and the endpoint HTTP-probe
// overrides. The checks are registered at the end of crossChecks.

// LoxiLB's annotation limits (reference §2.1): 32 keys, 256-character values.
const (
	maxAnnotations        = 32
	maxAnnotationValueLen = 256
	maxAnnotationKeyLen   = 256
	maxSecondaryVIPs      = 16
)

// Probe methods served (Octavia allows more; a probe that writes is not a
// liveness check).
var probeMethods = map[string]bool{"GET": true, "HEAD": true}

func checkAnnotations(r *Rule) *apierror.Error {
	a := r.ServiceArguments.Annotations
	if len(a) > maxAnnotations {
		msg := fmt.Sprintf("annotations has %d keys; at most %d are allowed", len(a), maxAnnotations)
		return invalidField(saPath(fieldAnnotations), msg, msg)
	}
	for k, v := range a {
		p := saPath(fieldAnnotations) + "." + k
		switch {
		case k == "" || len(k) > maxAnnotationKeyLen:
			msg := fmt.Sprintf("annotation keys must be 1..%d bytes long", maxAnnotationKeyLen)
			return invalidField(p, msg, msg)
		case utf8.RuneCountInString(v) > maxAnnotationValueLen:
			msg := fmt.Sprintf("annotation %q is %d characters long; at most %d are allowed", k, utf8.RuneCountInString(v), maxAnnotationValueLen)
			return invalidField(p, msg, msg)
		}
	}
	return nil
}

func secondaryVIPPath(i int, name string) string {
	return fieldSecondaryVIPs + "[" + strconv.Itoa(i) + "]." + name
}

// checkSecondaryVIPs applies externalIP's own rules to every secondary VIP:
// an IP literal, the endpoints' family, and no address twice.
func checkSecondaryVIPs(r *Rule) *apierror.Error {
	if len(r.SecondaryVIPs) > maxSecondaryVIPs {
		msg := fmt.Sprintf("at most %d secondaryVIPs", maxSecondaryVIPs)
		return invalidField(fieldSecondaryVIPs, msg, msg)
	}
	primary, _ := ParseIPLiteral(r.ServiceArguments.ExternalIP)
	seen := map[netip.Addr]int{}
	for i, sv := range r.SecondaryVIPs {
		p := secondaryVIPPath(i, fieldAddress)
		a, ok := ParseIPLiteral(sv.Address)
		if !ok {
			msg := fmt.Sprintf("%s in body must be of type ip-address: %q", p, sv.Address)
			return invalidField(p, "malformed-service error", msg)
		}
		if a.IsUnspecified() {
			msg := fmt.Sprintf("secondary VIP %s is unspecified; name a concrete address", a)
			return invalidField(p, msg, msg)
		}
		if a == primary {
			msg := fmt.Sprintf("secondary VIP %s repeats externalIP", a)
			return invalidCombo(p, msg, msg)
		}
		if j, dup := seen[a]; dup {
			msg := fmt.Sprintf("secondary VIP %s is listed twice (secondaryVIPs[%d] and secondaryVIPs[%d])", a, j, i)
			return invalidField(p, msg, msg)
		}
		seen[a] = i
		for k, ep := range r.Endpoints {
			e, _ := ParseIPLiteral(ep.EndpointIP)
			if a.Is4() && !e.Is4() {
				msg := fmt.Sprintf("IPv6 endpoint %s behind IPv4 secondary VIP %s (nat46) is not supported", ep.EndpointIP, a)
				return invalidCombo(epPath(k, fieldEndpointIP), "malformed-service nat46 error", msg)
			}
		}
	}
	return nil
}

// checkEndpointProbes validates the per-endpoint HTTP probe overrides; they
// only mean something when the rule probes over HTTP(S).
func checkEndpointProbes(r *Rule) *apierror.Error {
	typ := compileProbe(&r.ServiceArguments).Type
	for i, ep := range r.Endpoints {
		if ep.HTTPMethod == "" && ep.URLPath == "" && ep.ExpectedCodes == "" {
			continue
		}
		field := fieldHTTPMethod
		switch {
		case ep.URLPath != "":
			field = fieldURLPath
		case ep.ExpectedCodes != "":
			field = fieldExpectedCodes
		}
		if typ != probeHTTP && typ != probeHTTPS {
			msg := fmt.Sprintf("%s is an HTTP health-probe setting; this rule's probetype is %q (use http or https)", field, typ)
			return invalidCombo(epPath(i, field), msg, msg)
		}
		if m := ep.HTTPMethod; m != "" && !probeMethods[strings.ToUpper(m)] {
			msg := fmt.Sprintf("httpMethod %q is not served for probes; use GET or HEAD", m)
			return unsupported(epPath(i, fieldHTTPMethod), msg)
		}
		if p := ep.URLPath; p != "" && (p[0] != '/' || strings.ContainsAny(p, " \t\r\n#")) {
			msg := fmt.Sprintf("urlPath %q must be an absolute path (start with /, no spaces or fragment)", p)
			return invalidField(epPath(i, fieldURLPath), msg, msg)
		}
		if c := ep.ExpectedCodes; c != "" {
			if _, err := ParseExpectedCodes(c); err != nil {
				msg := fmt.Sprintf("expectedCodes %q: %v (want \"200\", \"200,202\" or \"200-204\")", c, err)
				return invalidField(epPath(i, fieldExpectedCodes), msg, msg)
			}
		}
	}
	return nil
}

// ParseExpectedCodes parses Octavia's expected_codes: a code, a comma list
// or a range (or a list of ranges), each code in 100..599.
func ParseExpectedCodes(s string) (spec.StatusSet, error) {
	var out spec.StatusSet
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		l, err := parseStatusCode(lo)
		if err != nil {
			return out, err
		}
		h := l
		if isRange {
			if h, err = parseStatusCode(hi); err != nil {
				return out, err
			}
			if h < l {
				return out, fmt.Errorf("range %q is reversed", part)
			}
		}
		out.Add(l, h)
	}
	return out, nil
}

func parseStatusCode(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 100 || n > 599 {
		return 0, fmt.Errorf("%q is not an HTTP status code", s)
	}
	return n, nil
}

// compileEndpointProbe returns ep's own probe when it overrides the rule's.
func compileEndpointProbe(rule spec.Probe, ep *Endpoint) *spec.Probe {
	if ep.HTTPMethod == "" && ep.URLPath == "" && ep.ExpectedCodes == "" {
		return nil
	}
	p := rule
	if ep.HTTPMethod != "" {
		p.Method = strings.ToUpper(ep.HTTPMethod)
	}
	if ep.URLPath != "" {
		p.Request = ep.URLPath
	}
	if ep.ExpectedCodes != "" {
		p.Codes, _ = ParseExpectedCodes(ep.ExpectedCodes) // validated
	}
	return &p
}

// compileLoxiLB fills the issue-12 parts of a compiled rule.
func compileLoxiLB(r *Rule, out *spec.Rule) {
	sa := &r.ServiceArguments
	out.AdminDown = sa.AdminStateUp != nil && !*sa.AdminStateUp
	for _, sv := range r.SecondaryVIPs {
		a, _ := ParseIPLiteral(sv.Address)
		out.SecondaryVIPs = append(out.SecondaryVIPs, a)
	}
	for i := range r.Endpoints {
		out.Endpoints[i].Probe = compileEndpointProbe(out.Probe, &r.Endpoints[i])
	}
}

// AdminUp reports the effective adminStateUp (absent = true).
func AdminUp(sa *ServiceArguments) bool { return sa.AdminStateUp == nil || *sa.AdminStateUp }

// EffectiveInactiveTimeOut is the idle timeout a rule runs with, in
// seconds (0 on the wire = the default), as GET reports it.
func EffectiveInactiveTimeOut(sa *ServiceArguments) int {
	return orInt(sa.InactiveTimeOut, int(defaultIdleTimeout.Seconds()))
}

// normalizeLoxiLB is normalize for the issue-12 fields: stored copies share
// no memory with the caller, brackets are stripped, output-only state goes.
func normalizeLoxiLB(r *Rule) {
	sa := &r.ServiceArguments
	sa.AdminStateUp = clonePtr(sa.AdminStateUp)
	if len(sa.Annotations) == 0 {
		sa.Annotations = nil
	} else {
		sa.Annotations = maps.Clone(sa.Annotations)
	}
	svs := slices.Clone(r.SecondaryVIPs)
	for i := range svs {
		svs[i].Address = stripBrackets(svs[i].Address)
	}
	if len(svs) == 0 {
		svs = nil
	}
	r.SecondaryVIPs = svs
	for i := range r.Endpoints {
		r.Endpoints[i].Health = ""
		r.Endpoints[i].HTTPMethod = strings.ToUpper(r.Endpoints[i].HTTPMethod)
	}
}

// effectiveLoxiLB resolves the issue-12 defaults for the "nothing changed"
// comparison: adminStateUp absent ≡ true, and endpoint order does not
// matter (LoxiLB reconciles endpoints by IP:port and reorders them).
func effectiveLoxiLB(r *Rule) {
	up := AdminUp(&r.ServiceArguments)
	r.ServiceArguments.AdminStateUp = &up
	slices.SortStableFunc(r.Endpoints, compareEndpoints)
}

// compareEndpoints orders endpoints as LoxiLB lists them: by IP (numeric),
// then target port.
func compareEndpoints(a, b Endpoint) int {
	x, _ := ParseIPLiteral(a.EndpointIP)
	y, _ := ParseIPLiteral(b.EndpointIP)
	if c := x.Compare(y); c != 0 {
		return c
	}
	return cmp.Compare(a.TargetPort, b.TargetPort)
}

// SortEndpointsLoxiLB orders eps in place the way LoxiLB's GET lists them.
func SortEndpointsLoxiLB(eps []Endpoint) { slices.SortStableFunc(eps, compareEndpoints) }
