// Command enginesim runs a fleet of simulated vLLM engines on loopback
// addresses (test/enginesim) until interrupted: the engines the routing
// benchmark (test/bench/routebench) puts behind infergate.
//
//	enginesim --engines 8 --first-ip 127.0.0.101 --port 18000 --zmq-port 15557 \
//	    --tokenizer kvexact/bpe/testdata/qwen3
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/infergate/infergate/test/enginesim"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "enginesim:", err)
		os.Exit(1)
	}
}

func run() error {
	d := enginesim.DefaultOptions()
	o := enginesim.FleetOptions{Engine: d}
	var firstIP string
	flag.IntVar(&o.Both, "engines", 8, "whole-request engines")
	flag.IntVar(&o.Prefill, "prefill", 0, "prefill engines (NIXL kv_producer), after the whole-request ones")
	flag.IntVar(&o.Decode, "decode", 0, "decode engines (NIXL kv_consumer), after the prefill ones")
	flag.StringVar(&firstIP, "first-ip", "127.0.0.101", "address of the first engine; the others follow")
	flag.IntVar(&o.Port, "port", 18000, "HTTP port of every engine")
	flag.IntVar(&o.ZMQPort, "zmq-port", 15557, "KV-event PUB port of every engine (0: no events)")
	flag.IntVar(&o.NixlPort, "nixl-port", 15600, "NIXL side-channel port advertised by prefills")
	flag.StringVar(&o.TokenizerDir, "tokenizer", "kvexact/bpe/testdata/qwen3", "Hugging Face tokenizer directory")
	flag.StringVar(&o.Engine.Model, "model", d.Model, "served model name")
	flag.IntVar(&o.Engine.KVBlocks, "kv-blocks", d.KVBlocks, "KV-cache blocks per engine")
	flag.IntVar(&o.Engine.BlockSize, "block-size", d.BlockSize, "tokens per KV block")
	flag.IntVar(&o.Engine.MaxNumSeqs, "max-num-seqs", d.MaxNumSeqs, "most running requests per engine")
	flag.IntVar(&o.Engine.MaxBatchedTokens, "max-num-batched-tokens", d.MaxBatchedTokens, "token budget of one step")
	flag.DurationVar(&o.Engine.DecodeStep, "decode-step", d.DecodeStep, "decode step with one running request")
	flag.Float64Var(&o.Engine.LoadFactor, "load-factor", d.LoadFactor, "decode step multiplier at max-num-seqs running")
	flag.DurationVar(&o.Engine.PrefillOverhead, "prefill-overhead", d.PrefillOverhead, "prefill cost per request")
	flag.DurationVar(&o.Engine.PrefillPerToken, "prefill-per-token", d.PrefillPerToken, "prefill cost per uncached prompt token")
	flag.DurationVar(&o.Engine.TransferPerToken, "kv-transfer-per-token", d.TransferPerToken, "decode-side KV pull per token")
	flag.StringVar(&o.Engine.HashSeed, "hash-seed", d.HashSeed, "PYTHONHASHSEED of the sha256_cbor block hashes")
	flag.Parse()
	ip, err := netip.ParseAddr(firstIP)
	if err != nil {
		return fmt.Errorf("--first-ip: %w", err)
	}
	o.FirstIP = ip
	f, err := enginesim.StartFleet(o)
	if err != nil {
		return err
	}
	for _, e := range f.Engines {
		fmt.Printf("engine %s events %s\n", e.Addr(), e.KVEndpoint())
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	return f.Close()
}
