package cli

import (
	"crypto/tls"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/spf13/cobra"
)

// fakeEngineCmdName is the hidden subcommand `infergate demo` starts its
// engines with (os.Executable() + this name), so the demo needs no second
// binary and each engine is its own process, killable like a real one.
const fakeEngineCmdName = "fake-engine"

// newFakeEngineCmd runs one recording fake P/D engine (internal/pdfake) until
// SIGINT/SIGTERM. It prints pdfake's banner line (with addr=ip:port) first,
// which is how the demo learns the bound port.
func newFakeEngineCmd(g *globals) *cobra.Command {
	cfg := pdfake.DefaultConfig(pdfake.VLLM, pdfake.Prefill)
	var dialect, role string
	var nixl, boot uint16
	var tlsCert, tlsKey string
	cmd := &cobra.Command{
		Use:    fakeEngineCmdName,
		Short:  "Run one fake inference engine (demo and tests only)",
		Hidden: true,
		Args:   exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			cfg.Dialect, cfg.Role = pdfake.Dialect(dialect), pdfake.Role(role)
			cfg.NixlPort, cfg.BootstrapPort = nixl, boot
			if tlsCert != "" || tlsKey != "" {
				pair, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return usagef("--tls-cert/--tls-key: %v", err)
				}
				cfg.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := pdfake.Run(ctx, cfg, g.env.Stdout); err != nil {
				return fmt.Errorf("fake engine %s/%s on %s: %w", dialect, role, cfg.Addr, err)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&dialect, "dialect", string(pdfake.VLLM), "engine protocol: vllm, sglang or trtllm")
	fl.StringVar(&role, "role", string(pdfake.Prefill), "prefill or decode")
	fl.StringVar(&cfg.Addr, "addr", "127.0.0.1:0", "listen address (port 0: ephemeral, printed in the banner)")
	fl.Uint16Var(&nixl, "nixl-port", 0, "vLLM NIXL side-channel port reported to decode (0: the HTTP port)")
	fl.Uint16Var(&boot, "bootstrap-port", 0, "SGLang prefill bootstrap port (0: ephemeral)")
	fl.IntVar(&cfg.StreamChunks, "stream-chunks", cfg.StreamChunks, "token events per streamed answer")
	fl.DurationVar(&cfg.ChunkDelay, "chunk-delay", 20*time.Millisecond, "pause between streamed events")
	fl.BoolVar(&cfg.HonorMaxTokens, "honor-max-tokens", false, "stop at the request's max_tokens (finish_reason length), as engines do")
	fl.BoolVar(&cfg.ExportMetrics, "export-metrics", false, "serve GET /metrics with the engine's load families (requests running, waiting, KV use)")
	fl.IntVar(&cfg.MaxRunningRequests, "max-running-requests", 0, "batch limit the engine reports (SGLang GET /server_info, vLLM dev-mode GET /server_info), which serve --engine-learn-windows reads (0: not reported)")
	fl.StringVar(&cfg.Model, "model", cfg.Model, "model name reported in answers")
	fl.StringVar(&tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM), for security 2 rules")
	fl.StringVar(&tlsKey, "tls-key", "", "private key (PEM) of --tls-cert")
	fl.IntVar(&cfg.KV.ZMQPort, "kv-zmq-port", 0, "vLLM: serve /tokenize and publish KV events on this ZMQ PUB port of the engine's IP (0: off)")
	fl.IntVar(&cfg.KV.BlockSize, "block-size", 16, "vLLM: KV block size of the published events (the engine's --block-size)")
	return cmd
}
