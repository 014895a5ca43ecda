package cli

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/infergate/infergate/daemon"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
)

func newServeCmd(g *globals) *cobra.Command {
	opts := daemon.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway: management API, rule store and datapath",
		Args:  exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if g.env.Serve == nil {
				return errors.New("serve is not available in this build")
			}
			level, err := logrus.ParseLevel(opts.LogLevel)
			if err != nil {
				return usagef("--log-level %q: %v", opts.LogLevel, err)
			}
			log := logrus.New()
			log.SetOutput(g.env.Stderr)
			log.SetLevel(level)
			// Cancelling ctx is the daemon's graceful shutdown: drain, then exit.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := g.env.Serve(ctx, opts, log); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.APIAddr, "api-addr", opts.APIAddr, "management API listen address")
	fl.StringVar(&opts.StateDir, "state-dir", opts.StateDir, "directory of the persisted rule set")
	fl.StringVar(&opts.RulesPath, "rules", opts.RulesPath, "YAML rule file or directory applied at boot")
	fl.BoolVar(&opts.BindAnyVIP, "bind-any-vip", opts.BindAnyVIP, "serve non-local VIPs on 0.0.0.0:<port>")
	fl.StringVar(&opts.LogLevel, "log-level", opts.LogLevel, "log level: debug|info|warn|error")
	// TLS (issue 11).
	fl.StringVar(&opts.CertRoot, "cert-root", opts.CertRoot, "LoxiLB certificate root for HTTPS VIPs: <root>/server.crt|key is the default certificate, <root>/<hostname>/ a host's (default <state-dir>/cert)")
	fl.StringVar(&opts.APITLSCert, "api-tls-cert", opts.APITLSCert, "serve the management API over HTTPS with this certificate (PEM)")
	fl.StringVar(&opts.APITLSKey, "api-tls-key", opts.APITLSKey, "private key (PEM) of --api-tls-cert")
	fl.StringVar(&opts.APITLSClientCA, "api-tls-client-ca", opts.APITLSClientCA, "require management API clients to present a certificate from this CA (mTLS)")
	fl.DurationVar(&opts.ShutdownTimeout, "shutdown-timeout", opts.ShutdownTimeout, "bound on the graceful API shutdown after SIGINT/SIGTERM")
	fl.Int64Var(&opts.MaxBodyBytes, "max-body-bytes", opts.MaxBodyBytes, "largest request body proxied (413 above)")
	fl.IntVar(&opts.BreakerConnectFailures, "breaker-connect-failures", opts.BreakerConnectFailures, "consecutive connect failures that open an endpoint's breaker")
	fl.IntVar(&opts.BreakerPDConnectFailures, "breaker-pd-connect-failures", opts.BreakerPDConnectFailures, "same, on P/D rules")
	fl.IntVar(&opts.Breaker5xxStreak, "breaker-5xx-streak", opts.Breaker5xxStreak, "origin 5xx streak that opens a single-pool endpoint's breaker (0 disables it on single pools only: P/D rules then still trip on a streak of 5)")
	fl.DurationVar(&opts.BreakerOpenFor, "breaker-open-for", opts.BreakerOpenFor, "how long an open breaker stays open")
	fl.DurationVar(&opts.DrainGrace, "drain-grace", opts.DrainGrace, "in-flight drain window on rule delete/update")
	fl.DurationVar(&opts.PrefillTimeout, "prefill-timeout", opts.PrefillTimeout, "P/D prefill leg timeout")
	fl.DurationVar(&opts.DecodeFirstByteTimeout, "decode-first-byte-timeout", opts.DecodeFirstByteTimeout, "P/D decode time-to-first-byte timeout")
	fl.StringVar(&opts.KVBindAddr, "kv-bind-addr", opts.KVBindAddr, "KV-exact: bind one ZMQ SUB socket here (e.g. tcp://0.0.0.0:5557) and let engines connect with topic kv@<ip:port>@<model>; empty dials every engine")
	fl.IntVar(&opts.KVReplayPortOffset, "kv-replay-port-offset", opts.KVReplayPortOffset, "KV-exact: engine replay ROUTER at kvZmqPort+offset (0: no replay)")
	fl.DurationVar(&opts.KVTokenizeTimeout, "kv-tokenize-timeout", opts.KVTokenizeTimeout, "KV-exact: budget of one engine /tokenize call; slower requests skip Tier 1.5")
	fl.IntVar(&opts.KVZeroHitN, "kv-zero-hit-n", opts.KVZeroHitN, "KV-exact: consecutive zero-hit lookups (while events flow) that log a parity warning")
	fl.DurationVar(&opts.KVTRTPollInterval, "kv-trt-poll-interval", opts.KVTRTPollInterval, "KV-exact: pause between TensorRT-LLM /kv_cache_events drains")
	fl.DurationVar(&opts.KVStaleAfter, "kv-stale-after", opts.KVStaleAfter, "KV-exact: an endpoint sent work this long ago that published no KV event since is untrusted until its next event (its feed stopped with the socket up; negative disables)")
	fl.IntVar(&opts.KVSingleLoadGuard, "kv-single-load-guard", opts.KVSingleLoadGuard, "KV-exact single pools (kvExactMode 3): skip a cache winner loaded this much above the least loaded (negative disables)")
	fl.Int64Var(&opts.PrefixIndexBudgetBytes, "prefix-index-budget-bytes", opts.PrefixIndexBudgetBytes, "prefix affinity (pd_cache_aware_mode): memory budget of each rule's prefix index; least recently used prefixes are evicted above it")
	fl.IntVar(&opts.PrefixKeyMaxBytes, "prefix-key-max-bytes", opts.PrefixKeyMaxBytes, "prefix affinity: bytes of each prompt that are keyed and matched (longer prompts are keyed on their head)")
	return cmd
}
