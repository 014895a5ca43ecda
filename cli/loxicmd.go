package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/infergate/infergate/rules"
	"github.com/spf13/pflag"
)

// loxicmd's command lines: its global connection flags and the
// create lb flags infergate's own set lacked. Each flag maps to the JSON
// field loxicmd sends; what infergate does not serve is refused by the
// server with its `unsupported` message, not second-guessed here.

// Defaults of loxicmd's global flags.
const (
	loxiDefaultAPIServer = "127.0.0.1"
	loxiDefaultPort      = 11111
	loxiDefaultProtocol  = "http"
)

// loxiGlobals are loxicmd's -s/--apiserver, -p/--port and --protocol.
type loxiGlobals struct {
	fs        *pflag.FlagSet
	apiserver string
	port      int
	protocol  string
}

func addLoxiGlobals(pf *pflag.FlagSet) *loxiGlobals {
	l := &loxiGlobals{fs: pf}
	pf.StringVarP(&l.apiserver, "apiserver", "s", loxiDefaultAPIServer, "management API host (loxicmd's flag; with -p and --protocol it overrides --server)")
	pf.IntVarP(&l.port, "port", "p", loxiDefaultPort, "management API port (loxicmd's flag)")
	pf.StringVar(&l.protocol, "protocol", loxiDefaultProtocol, "management API scheme: http or https (loxicmd's flag)")
	return l
}

// changed reports whether any loxicmd connection flag was given.
func (l *loxiGlobals) changed() bool {
	return l.fs.Changed("apiserver") || l.fs.Changed("port") || l.fs.Changed("protocol")
}

// baseURL is the server loxicmd's flags name, or "" when none was given.
func (l *loxiGlobals) baseURL() (string, error) {
	if !l.changed() {
		return "", nil
	}
	switch l.protocol {
	case "http", "https":
	default:
		return "", usagef("--protocol %q: want http or https", l.protocol)
	}
	if l.port < 1 || l.port > 65535 {
		return "", usagef("--port %d: want 1..65535", l.port)
	}
	host := strings.Trim(l.apiserver, "[]")
	return l.protocol + "://" + net.JoinHostPort(host, strconv.Itoa(l.port)), nil
}

// loxiCreateFlags are loxicmd's create lb flags beyond infergate's own.
type loxiCreateFlags struct {
	fs                      *pflag.FlagSet
	udp, sctp               string
	icmp                    bool
	secIPs, sources         string
	attach, detach          bool
	chwblLevel, chwblFlags  int
	chwblCacheSalt          bool
	connectionLimit         uint32
	apiKeyAuth, sockMapMode string
	mtlsFront               mtlsFrontFlags
	mtlsBack                mtlsBackFlags
	fcNums                  map[string]*uint32 // --fc-* numeric flags by JSON key
	fcWords                 map[string]*string // --fc-* word flags by JSON key
}

// loxicmd's capacity-admission flags and the JSON keys they set. infergate
// does not serve capacity admission: the server answers unsupported unless
// the value asks for nothing (0, off, inherit).
var (
	fcNumFlags = map[string]string{
		"fc-max-outstanding": "fc_max_outstanding", "fc-ep-max-inflight": "fc_ep_max_inflight",
		"fc-prefill-max-inflight": "fc_prefill_max_inflight", "fc-decode-max-inflight": "fc_decode_max_inflight",
		"fc-max-queue-depth": "fc_max_queue_depth", "fc-max-queue-wait-ms": "fc_max_queue_wait_ms",
		"fc-telemetry-stale-ms": "fc_telemetry_stale_ms", "fc-warmup-ms": "fc_warmup_ms",
		"fc-ttft-target-ms": "fc_ttft_target_ms", "fc-tenant-max-share-pct": "fc_tenant_max_share_pct",
	}
	fcWordFlags = map[string]string{"fc-mode": "fc_mode", "fc-adaptive": "fc_adaptive", "fc-expose-headers": "fc_expose_headers"}
)

type mtlsFrontFlags struct {
	certMode, caPath, cnPattern, crlPath string
	requireCN                            bool
}

type mtlsBackFlags struct {
	verify                    bool
	caPath, certPath, keyPath string
}

func addLoxiCreateFlags(fl *pflag.FlagSet, sa *rules.ServiceArguments) *loxiCreateFlags {
	l := &loxiCreateFlags{fs: fl}
	fl.StringVar(&l.udp, "udp", "", "udp service (loxicmd's flag; infergate serves tcp only, the server says so)")
	fl.StringVar(&l.sctp, "sctp", "", "sctp service (loxicmd's flag; refused by the server)")
	fl.BoolVar(&l.icmp, "icmp", false, "icmp service (loxicmd's flag; refused by the server)")
	fl.BoolVar(&sa.Monitor, "monitor", false, "health-probe the endpoints (tcp unless --probetype says otherwise)")
	fl.BoolVar(&sa.BGP, "bgp", false, "export the VIP over BGP (refused: not served)")
	fl.BoolVar(&sa.Egress, "egress", false, "egress rule (refused: an L4 feature)")
	fl.BoolVar(&sa.ProxyProtocolV2, "ppv2en", false, "send proxy protocol v2 (refused: not served)")
	fl.BoolVar(&l.attach, "attachEP", false, "attach endpoints (oper 1; refused: re-POST the full list)")
	fl.BoolVar(&l.detach, "detachEP", false, "detach endpoints (oper 2; refused: re-POST the full list)")
	fl.StringVar(&l.secIPs, "secips", "", "SCTP secondary IPs (refused: SCTP is not served)")
	fl.StringVar(&l.sources, "sources", "", "allowed source prefixes <cidr>,…")
	fl.StringVar(&sa.BackendProtocol, "backend-protocol", "", "backend transport: http1|http2|both")
	fl.StringVar(&sa.TraceType, "trace-type", "", "deep-inspection trace catalog")
	fl.IntVar(&sa.BackendKeepaliveIntervalSec, "backend-keepalive-interval", 0, "backend TCP keepalive interval in seconds (0 = off)")
	fl.IntVar(&l.chwblLevel, "chwbl-hash-level", 0, "CHWBL prefix hash level 1|2|3")
	fl.IntVar(&l.chwblFlags, "chwbl-hash-flags", 0, "CHWBL prefix hash flags 0..255")
	fl.IntVar(&sa.CHWBLMeanLoadFactor, "chwbl-load-factor", 0, "CHWBL bounded-load factor 100..300")
	fl.IntVar(&sa.CHWBLReplication, "chwbl-replication", 0, "CHWBL virtual nodes per endpoint 1..1024")
	fl.BoolVar(&l.chwblCacheSalt, "chwbl-cache-salt", false, "require cache_salt in CHWBL requests")
	fl.Uint32Var(&l.connectionLimit, "connection-limit", 0, "concurrent-connection ceiling of the rule (0 = unlimited)")
	fl.StringVar(&l.apiKeyAuth, "api-key-auth", "", "data-plane X-Api-Key policy: disabled|required")
	fl.StringVar(&l.sockMapMode, "sockmap-mode", "", "LoxiLB sockmap acceleration (refused: not part of infergate)")
	fl.StringVar(&l.mtlsFront.certMode, "mtls-client-cert-mode", "", "mTLS frontend client cert mode: disabled|optional|required")
	fl.StringVar(&l.mtlsFront.caPath, "mtls-client-ca-path", "", "mTLS frontend client CA bundle path")
	fl.BoolVar(&l.mtlsFront.requireCN, "mtls-require-client-cn", false, "mTLS frontend: enforce the client CN pattern")
	fl.StringVar(&l.mtlsFront.cnPattern, "mtls-client-cn-pattern", "", "mTLS frontend client CN glob")
	fl.StringVar(&l.mtlsFront.crlPath, "mtls-client-crl-path", "", "mTLS frontend CRL path")
	fl.BoolVar(&l.mtlsBack.verify, "mtls-backend-verify-server", false, "mTLS backend: verify the engine's certificate")
	fl.StringVar(&l.mtlsBack.caPath, "mtls-backend-ca-path", "", "mTLS backend CA path")
	fl.StringVar(&l.mtlsBack.certPath, "mtls-backend-cert-path", "", "mTLS backend client certificate path")
	fl.StringVar(&l.mtlsBack.keyPath, "mtls-backend-key-path", "", "mTLS backend client key path")
	l.fcNums, l.fcWords = map[string]*uint32{}, map[string]*string{}
	for flag, key := range fcNumFlags {
		l.fcNums[flag] = fl.Uint32(flag, 0, "LoxiLB capacity admission ("+key+"); not served by infergate")
	}
	for flag, key := range fcWordFlags {
		l.fcWords[flag] = fl.String(flag, "", "LoxiLB capacity admission ("+key+"); not served by infergate")
	}
	return l
}

// protocolPort returns the service protocol and port flag in use: loxicmd
// takes --tcp, --udp, --sctp or --icmp. One rule per command here.
func (l *loxiCreateFlags) protocolPort(tcp string) (proto, spec string, err error) {
	given := 0
	for _, p := range []struct{ name, val string }{{"tcp", tcp}, {"udp", l.udp}, {"sctp", l.sctp}} {
		if p.val != "" {
			proto, spec = p.name, p.val
			given++
		}
	}
	if l.icmp {
		proto, spec = "icmp", "0:0"
		given++
	}
	switch {
	case given == 0:
		return "", "", usagef("--tcp=<port>:<targetPort> is required")
	case given > 1:
		return "", "", usagef("give one of --tcp, --udp, --sctp, --icmp (infergate creates one rule per command)")
	}
	return proto, spec, nil
}

// apply maps the flags onto the rule (--security and the HSTS flags are
// create_tls.go's); sockMapMode and the fc_* fields the model lacks go to
// extra, merged into serviceArguments as loxicmd names them.
func (l *loxiCreateFlags) apply(r *rules.Rule) (extra map[string]any, err error) {
	sa := &r.ServiceArguments
	switch {
	case l.attach && l.detach:
		return nil, usagef("--attachEP and --detachEP exclude each other")
	case l.attach:
		sa.Oper = 1
	case l.detach:
		sa.Oper = 2
	}
	for _, ip := range splitList(l.secIPs) {
		r.SecondaryIPs = append(r.SecondaryIPs, rules.SecondaryIP{SecondaryIP: ip})
	}
	for _, p := range splitList(l.sources) {
		r.AllowedSources = append(r.AllowedSources, rules.AllowedSource{Prefix: p})
	}
	if l.fs.Changed("chwbl-hash-level") {
		v := l.chwblLevel
		sa.CHWBLPrefixHashLevel = &v
	}
	if l.fs.Changed("chwbl-hash-flags") {
		v := l.chwblFlags
		sa.CHWBLPrefixHashFlags = &v
	}
	if l.fs.Changed("chwbl-cache-salt") {
		v := l.chwblCacheSalt
		sa.CHWBLEnableCacheSalt = &v
	}
	extra = map[string]any{}
	set := func(flag, key string, v any) {
		if l.fs.Changed(flag) {
			extra[key] = v
		}
	}
	// Fields the rule model carries go onto the rule; only keys it lacks
	// (sockMapMode, fc_*) travel as extra so the server names them.
	if l.fs.Changed("connection-limit") {
		sa.ConnectionLimit = int(l.connectionLimit)
	}
	if l.fs.Changed("api-key-auth") {
		sa.APIKeyAuth = l.apiKeyAuth
	}
	set("sockmap-mode", "sockMapMode", l.sockMapMode)
	for flag, v := range l.fcNums {
		set(flag, fcNumFlags[flag], *v)
	}
	for flag, v := range l.fcWords {
		set(flag, fcWordFlags[flag], *v)
	}
	l.applyMTLS(sa)
	return extra, nil
}

// applyMTLS maps loxicmd's --mtls-* flags onto the rule's mtls_frontend and
// mtls_backend (filling what create_tls.go's flags already set).
func (l *loxiCreateFlags) applyMTLS(sa *rules.ServiceArguments) {
	ch := l.fs.Changed
	if ch("mtls-client-cert-mode") || ch("mtls-client-ca-path") || ch("mtls-require-client-cn") ||
		ch("mtls-client-cn-pattern") || ch("mtls-client-crl-path") {
		if sa.MTLSFrontend == nil {
			sa.MTLSFrontend = &rules.MTLSFrontend{}
		}
		fe, f := sa.MTLSFrontend, l.mtlsFront
		setIfChanged(ch("mtls-client-cert-mode"), &fe.ClientCertMode, f.certMode)
		setIfChanged(ch("mtls-client-ca-path"), &fe.ClientCAPath, f.caPath)
		setIfChanged(ch("mtls-require-client-cn"), &fe.RequireClientCN, f.requireCN)
		setIfChanged(ch("mtls-client-cn-pattern"), &fe.ClientCNPattern, f.cnPattern)
		setIfChanged(ch("mtls-client-crl-path"), &fe.ClientCRLPath, f.crlPath)
	}
	if ch("mtls-backend-verify-server") || ch("mtls-backend-ca-path") || ch("mtls-backend-cert-path") || ch("mtls-backend-key-path") {
		if sa.MTLSBackend == nil {
			sa.MTLSBackend = &rules.MTLSBackend{}
		}
		be, b := sa.MTLSBackend, l.mtlsBack
		if ch("mtls-backend-verify-server") {
			v := b.verify
			be.VerifyServerCert = &v
		}
		setIfChanged(ch("mtls-backend-ca-path"), &be.BackendCAPath, b.caPath)
		setIfChanged(ch("mtls-backend-cert-path"), &be.ClientCertPath, b.certPath)
		setIfChanged(ch("mtls-backend-key-path"), &be.ClientKeyPath, b.keyPath)
	}
}

func setIfChanged[T any](changed bool, dst *T, v T) {
	if changed {
		*dst = v
	}
}

// encodeWithExtra marshals r with extra merged into serviceArguments.
func encodeWithExtra(r rules.Rule, extra map[string]any) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil || len(extra) == 0 {
		return b, err
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(b, &body); err != nil {
		return nil, err
	}
	var sa map[string]any
	if err := json.Unmarshal(body["serviceArguments"], &sa); err != nil {
		return nil, err
	}
	for k, v := range extra {
		sa[k] = v
	}
	if body["serviceArguments"], err = json.Marshal(sa); err != nil {
		return nil, fmt.Errorf("encode serviceArguments: %w", err)
	}
	return json.Marshal(body)
}
