package cli

import (
	"github.com/infergate/infergate/rules"
	"github.com/spf13/cobra"
)

// groupCmd is a command that only holds subcommands; run alone (or with an
// unknown subcommand) it is a usage error, not a silent help page.
func groupCmd(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return usagef("%q needs a subcommand (see '%s --help')", cmd.CommandPath(), cmd.CommandPath())
		},
	}
}

// exactArgs is cobra.ExactArgs returning a usage error.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s) (%s), got %d", cmd.CommandPath(), n, what, len(args))
		}
		return nil
	}
}

// createFlags are `create lb`'s flags, named as loxicmd names them.
type createFlags struct {
	tcp, mode, sel string
	eps            endpointFlags
	sa             rules.ServiceArguments // scalar flags bind straight into the body
	loxi           *loxiCreateFlags       // loxicmd's further flags (loxicmd.go)
	tls            tlsFlags               // create_tls.go
	dryRun         bool                   // create_report.go
}

func newCreateCmd(g *globals) *cobra.Command {
	create := groupCmd("create", "Create a rule")
	f := &createFlags{}
	lb := &cobra.Command{
		Use:     "lb <VIP>",
		Aliases: []string{"loadbalancer"},
		Short:   "Create or update a load-balancer rule (POST /netlox/v1/config/loadbalancer); prints created, updated (fields: …) or unchanged",
		Example: `  infergate create lb 127.0.0.10 --tcp=8080:8000 --mode=fullproxy --pd-disagg \
    --endpoints=127.0.0.21:1,127.0.0.22:1 --ep-role=prefill,decode --nixl-port=5601,5602`,
		Args: exactArgs(1, "the VIP"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			r, extra, err := f.rule(args[0])
			if err != nil {
				return err
			}
			body, err := encodeWithExtra(r, extra)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return createRule(cmd.Context(), g, c, r, body, f.dryRun)
		}),
	}
	fl := lb.Flags()
	fl.BoolVar(&f.dryRun, "dry-run", false, "print what the rule would change (created, or each updated field) and change nothing")
	sa := &f.sa
	fl.StringVar(&f.tcp, "tcp", "", "service port and target port: <port>[-<portmax>]:<targetPort> (required)")
	fl.StringVar(&f.mode, "mode", modeFullProxyName, "NAT/proxy mode; infergate serves fullproxy only")
	fl.StringVar(&f.sel, "select", "rr", "endpoint selector: rr|hash|priority|persist|lc|chwbl|gpuaware|wrr-hash")
	fl.StringVar(&f.eps.endpoints, "endpoints", "", "endpoints <ip>:<weight>,… (required)")
	fl.StringVar(&f.eps.roles, "ep-role", "", "endpoint roles aligned to --endpoints: normal|prefill|decode or 0|1|2")
	fl.StringVar(&f.eps.nixlPorts, "nixl-port", "", "vLLM NIXL side-channel ports aligned to --endpoints")
	fl.StringVar(&f.eps.backups, "backup", "", "endpoint IPs (of --endpoints) to mark backup")

	fl.StringVar(&sa.Name, "name", "", "rule name (DELETE by name)")
	fl.StringVar(&sa.Host, "host", "", "L7 host key")
	fl.Uint32Var(&sa.Block, "mark", 0, "rule mark (block)")
	fl.StringVar(&sa.ModelName, "model-name", "", "model routing key (body model / X-Model)")
	fl.StringVar(&sa.PathPrefix, "path-prefix", "", "L7 path key")
	fl.StringVar(&sa.PathMatchMode, "path-match-mode", "", "path match: disabled|prefix|exact")
	fl.IntVar(&sa.InactiveTimeOut, "inatimeout", 0, "idle session timeout in seconds")
	fl.StringVar(&sa.SessionHeaderName, "session-header-name", "", "stickiness key: header, cookie:<n>, query:<n>")
	fl.BoolVar(&sa.SSEMode, "sse-mode", false, "SSE-aware streaming")
	fl.BoolVar(&sa.CBEnable, "cb-enable", false, "per-endpoint circuit breaker")
	fl.IntVar(&sa.MaxStreamDurationSec, "max-stream-duration", 0, "stream duration cap in seconds")

	fl.StringVar(&sa.ProbeType, "probetype", "", "health probe: http|https|tcp|none")
	fl.IntVar(&sa.ProbePort, "probeport", 0, "health probe port")
	fl.StringVar(&sa.ProbeReq, "probereq", "", "health probe request (HTTP path)")
	fl.StringVar(&sa.ProbeResp, "proberesp", "", "expected health probe response")
	fl.IntVar(&sa.ProbeTimeout, "probetimeout", 0, "health probe timeout in seconds")
	fl.IntVar(&sa.ProbeRetries, "proberetries", 0, "health probe retries")

	fl.BoolVar(&sa.PDDisaggMode, "pd-disagg", false, "prefill/decode disaggregation")
	fl.BoolVar(&sa.PDCacheAwareMode, "pd-cache-aware", false, "Tier 1 prefix affinity (needs --pd-disagg)")
	fl.IntVar(&sa.PDSessionTTLSec, "pd-session-ttl", 0, "P/D session pair TTL in seconds")
	fl.IntVar(&sa.PDCacheThreshold, "pd-cache-threshold", 0, "Tier 1 minimum prefix match percent")
	fl.IntVar(&sa.PDBalanceAbsThreshold, "pd-balance-abs-threshold", 0, "Tier 1 load-imbalance bypass")
	fl.IntVar(&sa.PDBootstrapPort, "pd-bootstrap-port", 0, "SGLang disaggregation bootstrap port")

	fl.IntVar(&sa.KVExactMode, "kv-exact-mode", 0, "KV-exact routing: 0 off, 1 P/D prefill pool, 3 single pool")
	fl.StringVar(&sa.KVEngineType, "kv-engine-type", "", "engine: vllm|sglang|trtllm|llamacpp")
	fl.IntVar(&sa.KVZmqPort, "kv-zmq-port", 0, "KV events ZMQ base port")
	fl.IntVar(&sa.KVBlockSize, "kv-block-size", 0, "KV block size in tokens")
	fl.StringVar(&sa.KVHashAlgo, "kv-hash-algo", "", "KV block hash (omit for the engine default)")
	fl.IntVar(&sa.KVDpRankCount, "kv-dp-ranks", 0, "data-parallel ranks per endpoint")
	fl.IntVar(&sa.KVWarmupSec, "kv-warmup", 0, "KV warmup window in seconds")
	f.loxi = addLoxiCreateFlags(fl, sa)
	f.tls.add(fl)
	create.AddCommand(lb)
	create.AddCommand(newCreateAPIKeyCmd(g))
	return create
}

// rule builds the POST body. Only flag-level facts are checked here; the
// server validates the rule.
func (f *createFlags) rule(vip string) (rules.Rule, map[string]any, error) {
	proto, portFlag, err := f.loxi.protocolPort(f.tcp)
	if err != nil {
		return rules.Rule{}, nil, err
	}
	ps, err := parsePortSpec(portFlag)
	if err != nil {
		return rules.Rule{}, nil, err
	}
	mode, err := parseMode(f.mode)
	if err != nil {
		return rules.Rule{}, nil, err
	}
	sel, err := parseSelect(f.sel)
	if err != nil {
		return rules.Rule{}, nil, err
	}
	eps, err := f.eps.build(ps.target)
	if err != nil {
		return rules.Rule{}, nil, err
	}
	sa := f.sa
	sa.ExternalIP, sa.Port, sa.PortMax, sa.Protocol = vip, ps.port, ps.portMax, proto
	sa.Mode, sa.Sel = mode, sel
	if err := f.tls.apply(&sa); err != nil {
		return rules.Rule{}, nil, err
	}
	r := rules.Rule{ServiceArguments: sa, Endpoints: eps}
	extra, err := f.loxi.apply(&r)
	if err != nil {
		return rules.Rule{}, nil, err
	}
	return r, extra, nil
}
