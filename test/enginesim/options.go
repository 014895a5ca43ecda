package enginesim

import (
	"fmt"
	"time"

	"github.com/infergate/infergate/kvexact"
)

// Role is an engine's part in a prefill/decode pair (the gateway's ep_role).
type Role int

// Roles: a whole-request engine, a NIXL prefill (kv_producer) or a NIXL
// decode (kv_consumer).
const (
	RoleBoth Role = iota
	RolePrefill
	RoleDecode
)

func (r Role) String() string {
	switch r {
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return "both"
}

// ParseRole reads "both", "prefill" or "decode".
func ParseRole(s string) (Role, error) {
	switch s {
	case "", "both":
		return RoleBoth, nil
	case "prefill":
		return RolePrefill, nil
	case "decode":
		return RoleDecode, nil
	}
	return 0, fmt.Errorf("enginesim: role %q is not both, prefill or decode", s)
}

// Options is one simulated engine's model. DefaultOptions holds the
// "8B on H100, balanced" profile.
type Options struct {
	Model string
	Role  Role

	// BlockSize is vLLM's --block-size (tokens per KV block).
	BlockSize int
	// KVBlocks is the number of KV blocks (the cache's capacity).
	KVBlocks int
	// MaxNumSeqs caps running requests; the rest wait in FIFO order.
	MaxNumSeqs int
	// MaxBatchedTokens is the per-step token budget (vLLM
	// --max-num-batched-tokens): decodes take one each, prefills are chunked
	// into what is left.
	MaxBatchedTokens int

	// DecodeStep is the time of a decode step with one running request.
	DecodeStep time.Duration
	// LoadFactor multiplies DecodeStep when MaxNumSeqs requests run
	// (linear in between).
	LoadFactor float64
	// PrefillOverhead is paid once per request, in the step its prefill
	// starts; PrefillPerToken for every uncached prompt token computed.
	PrefillOverhead time.Duration
	PrefillPerToken time.Duration
	// TransferPerToken is what a decode engine pays (asynchronously, before
	// it decodes) per prompt token it pulls from its prefill.
	TransferPerToken time.Duration

	// HashAlgo and HashSeed are vLLM's --prefix-caching-hash-algo and
	// PYTHONHASHSEED: the block hashes published in KV events.
	HashAlgo kvexact.HashAlgo
	HashSeed string
}

// DefaultOptions is llm-d-inference-sim's "8B on H100, balanced" profile
// (16 running, 12 ms per output token, 30 ms + 250 µs per prompt token,
// time factor 2.0 under full load, 3 µs per transferred token) with a cache
// small enough that a fleet cannot hold every prefix everywhere: 2,048
// blocks of 16 tokens (32k tokens) per engine.
func DefaultOptions() Options {
	return Options{
		Model:            "sim-8b",
		BlockSize:        kvexact.DefaultBlockSize,
		KVBlocks:         2048,
		MaxNumSeqs:       16,
		MaxBatchedTokens: 2048,
		DecodeStep:       12 * time.Millisecond,
		LoadFactor:       2.0,
		PrefillOverhead:  30 * time.Millisecond,
		PrefillPerToken:  250 * time.Microsecond,
		TransferPerToken: 3 * time.Microsecond,
		HashAlgo:         kvexact.AlgoSHA256CBOR,
		HashSeed:         "0",
	}
}

// validate reports an unusable model.
func (o Options) validate() error {
	switch {
	case o.BlockSize <= 0:
		return fmt.Errorf("enginesim: block size %d must be positive", o.BlockSize)
	case o.KVBlocks <= 0:
		return fmt.Errorf("enginesim: kv blocks %d must be positive", o.KVBlocks)
	case o.MaxNumSeqs <= 0:
		return fmt.Errorf("enginesim: max-num-seqs %d must be positive", o.MaxNumSeqs)
	case o.MaxBatchedTokens < o.MaxNumSeqs:
		return fmt.Errorf("enginesim: max-num-batched-tokens %d is below max-num-seqs %d", o.MaxBatchedTokens, o.MaxNumSeqs)
	case o.DecodeStep <= 0:
		return fmt.Errorf("enginesim: decode step %v must be positive", o.DecodeStep)
	case o.LoadFactor < 1:
		return fmt.Errorf("enginesim: load factor %v must be at least 1", o.LoadFactor)
	}
	return nil
}
