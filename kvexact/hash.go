package kvexact

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/zeebo/xxh3"
)

// HashAlgo names an engine block-hash contract (rule field kvHashAlgo).
type HashAlgo string

// The engine hash algorithms the gateway can reproduce. Anything else (vLLM's
// default pickle "sha256", TensorRT-LLM's v1_block_key) is not a contract and
// is handled by re-hashing event token_ids into own keys instead.
const (
	AlgoSHA256CBOR      HashAlgo = "sha256_cbor"      // vLLM --prefix-caching-hash-algo sha256_cbor
	AlgoXXHashCBOR      HashAlgo = "xxhash_cbor"      // vLLM --prefix-caching-hash-algo xxhash_cbor
	AlgoSHA256SGLang    HashAlgo = "sha256_sglang"    // SGLang page hash chain
	AlgoBlockHashTRTLLM HashAlgo = "blockhash_trtllm" // LoxiLB's re-hash for TRT-LLM: the SGLang chain
)

// Canonical CBOR major-type bytes used by the vLLM *_cbor encoders.
const (
	cborArray3    = 0x83
	cborNull      = 0xf6
	cborBytesBase = 0x40
	cborTextBase  = 0x60
	cborArrayBase = 0x80
)

// digestLen is the full digest size a vLLM algorithm chains with.
func digestLen(algo HashAlgo) (int, error) {
	switch algo {
	case AlgoSHA256CBOR:
		return sha256.Size, nil
	case AlgoXXHashCBOR:
		return 16, nil
	}
	return 0, fmt.Errorf("kvexact: %q is not a vLLM CBOR hash algorithm", algo)
}

// appendCBORHead appends a canonical (shortest-form) CBOR head for major type
// base (0x00 uint, 0x40 bytes, 0x60 text, 0x80 array) and argument n.
func appendCBORHead(dst []byte, base byte, n uint64) []byte {
	switch {
	case n < 24:
		return append(dst, base|byte(n))
	case n <= 0xff:
		return append(dst, base|24, byte(n))
	case n <= 0xffff:
		return append(dst, base|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		return append(dst, base|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	dst = append(dst, base|27)
	return binary.BigEndian.AppendUint64(dst, n)
}

// AppendVLLMBlockCBOR appends the canonical CBOR of vLLM's block-hash input
// tuple (parent digest, tokens, None): extra keys (LoRA, multimodal, salt) are
// not supported here because the gateway cannot reproduce them in general.
func AppendVLLMBlockCBOR(dst, parent []byte, tokens []uint32) []byte {
	dst = append(dst, cborArray3)
	dst = appendCBORHead(dst, cborBytesBase, uint64(len(parent)))
	dst = append(dst, parent...)
	dst = appendCBORHead(dst, cborArrayBase, uint64(len(tokens)))
	for _, t := range tokens {
		dst = appendCBORHead(dst, 0, uint64(t))
	}
	return append(dst, cborNull)
}

func vllmDigest(algo HashAlgo, dst, input []byte) []byte {
	if algo == AlgoXXHashCBOR {
		d := xxh3.Hash128(input).Bytes()
		return append(dst, d[:]...)
	}
	d := sha256.Sum256(input)
	return append(dst, d[:]...)
}

// NoneHash is vLLM's chain root for a fixed PYTHONHASHSEED: the algorithm's
// hash of the CBOR text string seed. An unset seed means a random root per
// engine process, which no gateway can predict; callers then use an all-zero
// root (LoxiLB's behaviour) or, better, own keys.
func NoneHash(algo HashAlgo, seed string) ([]byte, error) {
	if _, err := digestLen(algo); err != nil {
		return nil, err
	}
	in := appendCBORHead(nil, cborTextBase, uint64(len(seed)))
	in = append(in, seed...)
	return vllmDigest(algo, nil, in), nil
}

// VLLMHasher reproduces vLLM's sha256_cbor / xxhash_cbor block hashes.
// It is immutable after construction and safe for concurrent use.
type VLLMHasher struct {
	algo HashAlgo
	root []byte
}

// NewVLLMHasher builds a hasher. seed is PYTHONHASHSEED; nil selects the
// all-zero root (no seed configured on the gateway side).
func NewVLLMHasher(algo HashAlgo, seed *string) (*VLLMHasher, error) {
	n, err := digestLen(algo)
	if err != nil {
		return nil, err
	}
	root := make([]byte, n)
	if seed != nil {
		if root, err = NoneHash(algo, *seed); err != nil {
			return nil, err
		}
	}
	return &VLLMHasher{algo: algo, root: root}, nil
}

// Root returns the chain root digest (NONE_HASH).
func (h *VLLMHasher) Root() []byte { return append([]byte(nil), h.root...) }

// BlockDigest returns the full digest of one block given its parent's full
// digest. An empty parent is replaced by the root, as vLLM does for any falsy
// parent.
func (h *VLLMHasher) BlockDigest(parent []byte, tokens []uint32) []byte {
	if len(parent) == 0 {
		parent = h.root
	}
	var buf [512]byte
	in := AppendVLLMBlockCBOR(buf[:0], parent, tokens)
	return vllmDigest(h.algo, nil, in)
}

// VLLMWireHash is what vLLM publishes as an int: the low 64 bits of the
// digest, i.e. its last 8 bytes read big-endian (not the first 8).
func VLLMWireHash(digest []byte) uint64 { return tailUint64(digest) }

// Keys returns the published hashes of every full block of tokens.
func (h *VLLMHasher) Keys(tokens []uint32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]uint64, 0, n)
	var in [512]byte
	var dig [32]byte
	parent := h.root
	for i := 0; i < n; i++ {
		b := AppendVLLMBlockCBOR(in[:0], parent, tokens[i*blockSize:(i+1)*blockSize])
		parent = vllmDigest(h.algo, dig[:0], b)
		out = append(out, VLLMWireHash(parent))
	}
	return out
}

// SGLangChain returns SGLang's page hashes as published (signed int64,
// carried bit-for-bit in a uint64): digest_i = SHA-256(digest_{i-1} ‖ tokens
// as 4-byte little-endian), block 0 without parent bytes, key = first 8
// digest bytes big-endian. Like SGLang, a short last chunk is hashed as is;
// request-side callers pass full blocks only. LoxiLB's "blockhash_trtllm"
// re-hash of TensorRT-LLM event tokens is the same function.
func SGLangChain(tokens []uint32, pageSize int) []uint64 {
	if pageSize <= 0 {
		return nil
	}
	out := make([]uint64, 0, (len(tokens)+pageSize-1)/pageSize)
	var parent [sha256.Size]byte
	var le [4]byte
	for i := 0; i < len(tokens); i += pageSize {
		end := min(i+pageSize, len(tokens))
		h := sha256.New()
		if i > 0 {
			h.Write(parent[:])
		}
		for _, t := range tokens[i:end] {
			binary.LittleEndian.PutUint32(le[:], t)
			h.Write(le[:])
		}
		h.Sum(parent[:0])
		out = append(out, binary.BigEndian.Uint64(parent[:8]))
	}
	return out
}

// EngineKeys computes the engine's published hashes for a request's full
// blocks under a reproducible algorithm; seed is vLLM's PYTHONHASHSEED
// (ignored by the SHA-256 chain, which has no seed).
func EngineKeys(algo HashAlgo, seed *string, tokens []uint32, blockSize int) ([]uint64, error) {
	if blockSize <= 0 {
		return nil, fmt.Errorf("kvexact: block size %d must be positive", blockSize)
	}
	full := tokens[:len(tokens)/blockSize*blockSize]
	switch algo {
	case AlgoSHA256SGLang, AlgoBlockHashTRTLLM:
		return SGLangChain(full, blockSize), nil
	}
	h, err := NewVLLMHasher(algo, seed)
	if err != nil {
		return nil, err
	}
	return h.Keys(full, blockSize), nil
}

// tailUint64 reads the last 8 bytes big-endian, left-padding shorter input
// with zeros; this maps vLLM's bytes-mode hashes onto its int-mode values.
func tailUint64(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// nativeLittleEndian reports whether uint32s are stored little-endian, so
// token slices can be hashed without re-encoding (constant-folded).
func nativeLittleEndian() bool {
	var x uint16 = 1
	return *(*byte)(unsafe.Pointer(&x)) == 1
}

// RootKey is the parent of block 0 in infergate's own key chain. Scope
// (rule, model) is given by the inventory a key lives in, not by the root.
const RootKey uint64 = 0x9e3779b97f4a7c15

// ownKeyBufTokens bounds the stack buffer used by KeysForTokens.
const ownKeyBufTokens = 256

// KeysForTokens computes infergate's own chained block keys for every full
// block of tokens: key_i = xxhash64(key_{i-1} as 8 bytes LE ‖ tokens as
// 4-byte LE). Own keys are independent of engine hash settings (seed, algo),
// so they work for every engine; engine hashes only bridge BlockRemoved.
func KeysForTokens(tokens []uint32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	return AppendOwnKeys(make([]uint64, 0, len(tokens)/blockSize), RootKey, tokens, blockSize)
}

// AppendOwnKeys appends the own keys of the full blocks of tokens chained
// from parent.
func AppendOwnKeys(dst []uint64, parent uint64, tokens []uint32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	var stack [8 + 4*ownKeyBufTokens]byte
	buf := stack[:]
	if blockSize > ownKeyBufTokens {
		buf = make([]byte, 8+4*blockSize)
	}
	buf = buf[:8+4*blockSize]
	le := nativeLittleEndian()
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		binary.LittleEndian.PutUint64(buf, parent)
		blk := tokens[i : i+blockSize]
		if le {
			// The tokens' in-memory bytes already are the wire layout.
			copy(buf[8:], unsafe.Slice((*byte)(unsafe.Pointer(&blk[0])), 4*blockSize))
		} else {
			p := buf[8:]
			for j, t := range blk {
				binary.LittleEndian.PutUint32(p[4*j:], t)
			}
		}
		parent = xxhash.Sum64(buf)
		dst = append(dst, parent)
	}
	return dst
}
