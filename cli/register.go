package cli

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/spec"
	"github.com/spf13/cobra"
)

func newRegisterCmd(g *globals) *cobra.Command {
	eo := etcdstore.DefaultOptions()
	var store string
	var reg etcdstore.Registration
	ttl := 10 * time.Second
	cmd := &cobra.Command{
		Use:   "register --store etcd://… --url http://<ip>:<port> --role prefill|decode|any --engine vllm|sglang|trtllm --model <name>",
		Short: "Keep an engine registered in the shared store while this command runs (run it beside the engine)",
		Long: `register validates the engine's facts and keeps them under <prefix>/engines/<ip:port>
on an etcd lease of --ttl, kept alive until SIGINT/SIGTERM (then deregistered at
once). If this process dies, the lease expires after --ttl. An invalid
registration (e.g. an SGLang prefill without --bootstrap-port) is refused.`,
		Args: exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if !etcdstore.IsURL(store) {
				return usagef("register needs --store etcd://host:port[,…][/prefix]")
			}
			if err := reg.Validate(); err != nil {
				return usagef("%v", err)
			}
			_, eb, err := openStoreBackend(store, eo)
			if err != nil {
				return err
			}
			defer eb.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return eb.Register(ctx, reg, ttl, func() {
				fmt.Fprintf(g.env.Stdout, "registered %s (%s %s, model %s) with a %s lease\n", reg.URL, reg.Engine, reg.Role, reg.Model, ttl)
			})
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&store, "store", "", "etcd:// URL of the shared store")
	fl.StringVar(&reg.URL, "url", "", "engine's OpenAI server, http://<ip>:<port>")
	fl.StringVar(&reg.Role, "role", etcdstore.RoleAny, "prefill, decode or any")
	fl.StringVar(&reg.Engine, "engine", "vllm", "vllm, sglang or trtllm")
	fl.StringVar(&reg.Model, "model", "", "model the engine serves")
	fl.IntVar(&reg.NixlPort, "nixl-port", 0, "vLLM NIXL side-channel port")
	fl.IntVar(&reg.BootstrapPort, "bootstrap-port", 0, "bootstrap server port of an SGLang prefill, or of a vLLM prefill with --kv-connector MooncakeConnector")
	fl.IntVar(&reg.KVZmqPort, "kv-zmq-port", 0, "KV-events publisher port")
	fl.IntVar(&reg.DPRanks, "dp-ranks", 0, "data-parallel ranks (0 = 1)")
	fl.IntVar(&reg.BlockSize, "block-size", 0, "KV cache block size in tokens (must match across a prefill/decode pair)")
	fl.StringVar(&reg.KVConnector, "kv-connector", "", "KV connector, e.g. NixlConnector (must match across a prefill/decode pair)")
	fl.StringToStringVar(&reg.Labels, "label", nil, "free-form label key=value, as a static endpoint's labels (repeat or comma-separate; e.g. kv_engine_id, moriio_mode)")
	fl.DurationVar(&ttl, "ttl", ttl, "lease: how long after this process dies the registration disappears")
	etcdClientFlags(fl, &eo)
	return cmd
}

func newGetEnginesCmd(g *globals) *cobra.Command {
	eo := etcdstore.DefaultOptions()
	var store string
	cmd := &cobra.Command{
		Use:   "engines --store etcd://…",
		Short: "List engine self-registrations and why any is refused",
		Args:  exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if !etcdstore.IsURL(store) {
				return usagef("get engines needs --store etcd://host:port[,…][/prefix]")
			}
			_, eb, err := openStoreBackend(store, eo)
			if err != nil {
				return err
			}
			defer eb.Close()
			ctx, cancel := contextWithTimeout(cmd, g.timeout)
			defer cancel()
			list, err := etcdstore.Engines(ctx, eb.Client(), eb.Prefix())
			if err != nil {
				return err
			}
			return writeEngines(g.env.Stdout, list)
		}),
	}
	cmd.Flags().StringVar(&store, "store", "", "etcd:// URL of the shared store")
	etcdClientFlags(cmd.Flags(), &eo)
	return cmd
}

// writeEngines prints the registrations as `get engines` shows them, with
// each one's pairing key (the facts a prefill/decode pair must share),
// bootstrap port and labels ("-" for none).
func writeEngines(out io.Writer, list []etcdstore.EngineEntry) error {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ENGINE\tROLE\tKIND\tMODEL\tPAIRING\tBOOTSTRAP\tLABELS\tSTATE")
	for _, e := range list {
		state := "ok"
		if e.Refused != "" {
			state = "refused: " + e.Refused
		}
		r := e.Registration
		pairing := spec.PairingKey(r.PairFacts())
		if pairing == "" {
			pairing = "-"
		}
		boot := "-"
		if r.BootstrapPort != 0 {
			boot = strconv.Itoa(r.BootstrapPort)
		}
		labels := spec.PairingKey(r.Labels) // the same stable "k=v,…" form
		if labels == "" {
			labels = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Key, r.Role, r.Engine, r.Model, pairing, boot, labels, state)
	}
	return w.Flush()
}
