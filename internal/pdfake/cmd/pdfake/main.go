// Command pdfake runs one recording fake P/D engine (vLLM, SGLang or
// TensorRT-LLM; prefill or decode) for manual and end-to-end testing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
)

func main() {
	cfg := pdfake.DefaultConfig(pdfake.VLLM, pdfake.Prefill)
	dialect := flag.String("dialect", string(cfg.Dialect), "engine protocol: vllm, sglang or trtllm")
	role := flag.String("role", string(cfg.Role), "prefill (TRT-LLM context) or decode (generation)")
	flag.StringVar(&cfg.Addr, "addr", "127.0.0.1:8000", "listen address")
	nixl := flag.Uint("nixl-port", 0, "vLLM: NIXL side-channel port reported to decode (0: HTTP port)")
	boot := flag.Uint("bootstrap-port", 8998, "SGLang prefill: bootstrap server port on the same IP")
	flag.DurationVar(&cfg.RendezvousTimeout, "rendezvous-timeout", 20*time.Second, "SGLang: bound on waiting for the peer leg")
	flag.IntVar(&cfg.StreamChunks, "stream-chunks", cfg.StreamChunks, "token events per streamed answer")
	flag.DurationVar(&cfg.ChunkDelay, "chunk-delay", 0, "pause between streamed events")
	flag.StringVar(&cfg.AdvertiseHost, "advertise-host", "", "host peers know this engine by (SGLang bootstrap_host check, vLLM remote_host)")
	flag.IntVar(&cfg.KV.ZMQPort, "kv-zmq-port", 0, "vLLM: publish KV events on this ZMQ PUB port of the engine's IP (0: off)")
	flag.StringVar(&cfg.KV.ConnectAddr, "kv-connect", "", "vLLM: connect the KV PUB socket to a gateway's bound SUB socket instead (e.g. tcp://127.0.0.1:5557)")
	flag.IntVar(&cfg.KV.ReplayPort, "kv-replay-port", 0, "vLLM: bind the KV replay ROUTER on this port (0: none)")
	flag.IntVar(&cfg.KV.BlockSize, "block-size", 16, "vLLM: KV block size (tokens per published block)")
	kvEnc := flag.String("kv-encoding", "array", "vLLM: KV event encoding, array (vLLM ≤ 0.25) or map (≥ 0.26)")
	flag.Parse()
	switch *kvEnc {
	case "array":
	case "map":
		cfg.KV.MapEncoding = true
	default:
		fmt.Fprintln(os.Stderr, "pdfake: --kv-encoding must be array or map")
		os.Exit(2)
	}
	cfg.Dialect, cfg.Role = pdfake.Dialect(*dialect), pdfake.Role(*role)
	cfg.NixlPort, cfg.BootstrapPort = uint16(*nixl), uint16(*boot)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := pdfake.Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
