package enginesim

import (
	"flag"
	"fmt"
	"net/netip"
)

// Flags binds a fleet's options to fs with o's values as defaults, so the
// enginesim command and a benchmark that runs the fleet in its own process
// (test/bench/routebench) take the same flags. firstIP is parsed into
// o.FirstIP by ParseFirstIP after fs.Parse.
func (o *FleetOptions) Flags(fs *flag.FlagSet, firstIP *string) {
	d := o.Engine
	fs.IntVar(&o.Both, "engines", o.Both, "whole-request engines")
	fs.IntVar(&o.Prefill, "prefill", o.Prefill, "prefill engines (NIXL kv_producer), after the whole-request ones")
	fs.IntVar(&o.Decode, "decode", o.Decode, "decode engines (NIXL kv_consumer), after the prefill ones")
	fs.StringVar(firstIP, "first-ip", *firstIP, "address of the first engine; the others follow")
	fs.IntVar(&o.Port, "port", o.Port, "HTTP port of every engine")
	fs.IntVar(&o.ZMQPort, "zmq-port", o.ZMQPort, "KV-event PUB port of every engine (0: no events)")
	fs.IntVar(&o.NixlPort, "nixl-port", o.NixlPort, "NIXL side-channel port advertised by prefills")
	fs.StringVar(&o.TokenizerDir, "tokenizer", o.TokenizerDir, "Hugging Face tokenizer directory")
	fs.StringVar(&o.Engine.Model, "model", d.Model, "served model name")
	fs.IntVar(&o.Engine.KVBlocks, "kv-blocks", d.KVBlocks, "KV-cache blocks per engine")
	fs.IntVar(&o.Engine.BlockSize, "block-size", d.BlockSize, "tokens per KV block")
	fs.IntVar(&o.Engine.MaxNumSeqs, "max-num-seqs", d.MaxNumSeqs, "most running requests per engine")
	fs.IntVar(&o.Engine.MaxBatchedTokens, "max-num-batched-tokens", d.MaxBatchedTokens, "token budget of one step")
	fs.DurationVar(&o.Engine.DecodeStep, "decode-step", d.DecodeStep, "decode step with one running request")
	fs.Float64Var(&o.Engine.LoadFactor, "load-factor", d.LoadFactor, "decode step multiplier at max-num-seqs running")
	fs.DurationVar(&o.Engine.PrefillOverhead, "prefill-overhead", d.PrefillOverhead, "prefill cost per request")
	fs.DurationVar(&o.Engine.PrefillPerToken, "prefill-per-token", d.PrefillPerToken, "prefill cost per uncached prompt token")
	fs.DurationVar(&o.Engine.TransferPerToken, "kv-transfer-per-token", d.TransferPerToken, "decode-side KV pull per token")
	fs.StringVar(&o.Engine.HashSeed, "hash-seed", d.HashSeed, "PYTHONHASHSEED of the sha256_cbor block hashes")
}

// DefaultFleetOptions is the enginesim command's fleet: eight whole-request
// engines from 127.0.0.101 on port 18000, events on 15557.
func DefaultFleetOptions() FleetOptions {
	return FleetOptions{Engine: DefaultOptions(), Both: 8, FirstIP: netip.MustParseAddr("127.0.0.101"), Port: 18000,
		ZMQPort: 15557, NixlPort: 15600, TokenizerDir: "kvexact/bpe/testdata/qwen3"}
}

// ParseFirstIP sets o.FirstIP from the --first-ip flag's value.
func (o *FleetOptions) ParseFirstIP(s string) error {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("--first-ip: %w", err)
	}
	o.FirstIP = ip
	return nil
}
