package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/infergate/infergate/validate"
	"github.com/spf13/cobra"
)

// errValidationFailed is returned when a step FAILed: the report already
// says why, so only the exit code (1) carries it.
type errValidationFailed struct{ target string }

func (e errValidationFailed) Error() string { return "validation of " + e.target + " failed" }

func newValidateCmd(g *globals) *cobra.Command {
	opts := validate.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "validate <rule-name | VIP:port[/protocol]>",
		Short: "Run the rollout checks against a live rule and print the evidence",
		Long: `validate checks one live rule the way an operator would before a rollout:
endpoint readiness, rule shape (through the API, /compiled and /status), a
non-streaming and an SSE request through the VIP, metric deltas proving each
P/D role handled them, the cache-aware tiers and the KV-exact feed. Each step
ends PASS, WARN, FAIL or SKIP (precondition absent) with its evidence; a FAIL
names the likely causes. --disruptive also drains each endpoint in turn
(weight 0), then fails each in turn (its port replaced by one that refuses
connections: peers must serve and its breaker open), and always restores the
rule, even on Ctrl-C.
Exit code 0 when nothing FAILed, 1 otherwise.`,
		Args: exactArgs(1, "rule name or VIP:port"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			asJSON := false
			switch g.output {
			case "", outTable:
			case outJSON:
				asJSON = true
			default:
				return usagef("-o %q is not an output format for validate (want table|json)", g.output)
			}
			opts.Server, opts.Target = g.server, args[0]
			tok, err := g.apiToken()
			if err != nil {
				return err
			}
			opts.Token = tok
			if opts.APIKey == "" {
				opts.APIKey = g.env.Getenv(envValidateAPIKey)
			}
			opts.APIClient = g.httpClient // the API's TLS trust
			if g.timeout > opts.RequestTimeout {
				opts.RequestTimeout = g.timeout
			}
			if !asJSON {
				opts.Progress = g.env.Stdout
			}
			// Ctrl-C cancels the probes; a drained endpoint is restored on a
			// detached context before Run returns, and further signals are
			// swallowed until then.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := validate.Run(ctx, opts)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(g.env.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return fmt.Errorf("encode report: %w", err)
				}
			} else {
				fmt.Fprintln(g.env.Stdout)
				rep.WriteTable(g.env.Stdout)
			}
			if !rep.Passed {
				return failure{err: errValidationFailed{args[0]}}
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.BoolVar(&opts.Disruptive, "disruptive", false, "drain, then fail, each endpoint in turn, restoring the rule after each")
	fl.StringVar(&opts.Model, "model", "", "model sent in probes (default: the rule's model_name, else the engines' first model)")
	fl.StringVar(&opts.Path, "path", opts.Path, "request path of the probes on the VIP")
	fl.IntVar(&opts.Probes, "probes", opts.Probes, "requests per cache-aware and drain probe")
	fl.DurationVar(&opts.Settle, "settle", opts.Settle, "how long to wait for counters to reflect finished requests")
	fl.DurationVar(&opts.RequestTimeout, "request-timeout", 30*time.Second, "bound on each probe request")
	fl.StringVar(&opts.Store, "store", "", "etcd:// URL of the replicas' shared rule store: also check every replica serves the same rules")
	etcdClientFlags(fl, &opts.Etcd)
	fl.StringVar(&opts.APIKey, "api-key", "", "tenant API key (lxb_…) for a rule that enforces keys: probes carry it and the API-key step checks enforcement (or "+envValidateAPIKey+")")
	return cmd
}

// envValidateAPIKey supplies validate's --api-key without putting the key
// in the process list or shell history.
const envValidateAPIKey = "INFERGATE_VALIDATE_API_KEY"
