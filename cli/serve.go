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
	fl.DurationVar(&opts.ShutdownTimeout, "shutdown-timeout", opts.ShutdownTimeout, "bound on the graceful API shutdown after SIGINT/SIGTERM")
	fl.Int64Var(&opts.MaxBodyBytes, "max-body-bytes", opts.MaxBodyBytes, "largest request body proxied (413 above)")
	fl.IntVar(&opts.BreakerConnectFailures, "breaker-connect-failures", opts.BreakerConnectFailures, "consecutive connect failures that open an endpoint's breaker")
	fl.IntVar(&opts.BreakerPDConnectFailures, "breaker-pd-connect-failures", opts.BreakerPDConnectFailures, "same, on P/D rules")
	fl.IntVar(&opts.Breaker5xxStreak, "breaker-5xx-streak", opts.Breaker5xxStreak, "origin 5xx streak that opens the breaker (0 disables)")
	fl.DurationVar(&opts.BreakerOpenFor, "breaker-open-for", opts.BreakerOpenFor, "how long an open breaker stays open")
	fl.DurationVar(&opts.DrainGrace, "drain-grace", opts.DrainGrace, "in-flight drain window on rule delete/update")
	fl.DurationVar(&opts.PrefillTimeout, "prefill-timeout", opts.PrefillTimeout, "P/D prefill leg timeout")
	fl.DurationVar(&opts.DecodeFirstByteTimeout, "decode-first-byte-timeout", opts.DecodeFirstByteTimeout, "P/D decode time-to-first-byte timeout")
	return cmd
}
