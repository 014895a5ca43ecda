package kvexact

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// fixtureDir is the shared KV-hash fixture folder, relative to this package.
const fixtureDir = "../../shared/fixtures/kv_hash"

type hashVector struct {
	Name     string   `json:"name"`
	Algo     HashAlgo `json:"hash_algo"`
	Parent   string   `json:"parent_hash_hex"`
	Tokens   []uint32 `json:"tokens"`
	CBOR     string   `json:"cbor_hex"`
	Digest   string   `json:"expected_digest_hex"`
	WireHash uint64   `json:"expected_hash_uint64"`
}

type vectorSet struct {
	Seed       string       `json:"none_hash_seed"`
	NoneSHA256 string       `json:"none_hash_sha256_hex"`
	NoneXXHash string       `json:"none_hash_xxhash_hex"`
	BlockSize  int          `json:"block_size"`
	Fixtures   []hashVector `json:"fixtures"`
}

type vectorFile struct {
	vectorSet
	Models map[string]vectorSet `json:"models"`
}

func loadVectors(t *testing.T) vectorFile {
	t.Helper()
	path := filepath.Join(fixtureDir, "kv_hash_vectors.json")
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		t.Skipf("shared fixtures absent (%s); vLLM hash vectors not checked", path)
	}
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	var f vectorFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	return f
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("hex %q: %v", s, err)
	}
	return b
}

// TestVLLMVectors proves sha256_cbor and xxhash_cbor against every vector of
// the shared fixture file (root set and every model set).
func TestVLLMVectors(t *testing.T) {
	f := loadVectors(t)
	sets := map[string]vectorSet{"root": f.vectorSet}
	for name, s := range f.Models {
		sets[name] = s
	}
	total := 0
	for setName, set := range sets {
		for algo, want := range map[HashAlgo]string{AlgoSHA256CBOR: set.NoneSHA256, AlgoXXHashCBOR: set.NoneXXHash} {
			got, err := NoneHash(algo, set.Seed)
			if err != nil {
				t.Fatalf("%s NoneHash(%s): %v", setName, algo, err)
			}
			if hex.EncodeToString(got) != want {
				t.Errorf("%s NoneHash(%s, %q) = %x, want %s", setName, algo, set.Seed, got, want)
			}
		}
		for _, v := range set.Fixtures {
			total++
			parent := mustHex(t, v.Parent)
			if v.CBOR != "" {
				if got := AppendVLLMBlockCBOR(nil, parent, v.Tokens); !bytes.Equal(got, mustHex(t, v.CBOR)) {
					t.Errorf("%s/%s cbor = %x, want %s", setName, v.Name, got, v.CBOR)
				}
			}
			h, err := NewVLLMHasher(v.Algo, nil)
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			dig := h.BlockDigest(parent, v.Tokens)
			if hex.EncodeToString(dig) != v.Digest {
				t.Errorf("%s/%s digest = %x, want %s", setName, v.Name, dig, v.Digest)
			}
			if got := VLLMWireHash(dig); got != v.WireHash {
				t.Errorf("%s/%s wire hash = %d, want %d", setName, v.Name, got, v.WireHash)
			}
		}
	}
	if total < 12 {
		t.Errorf("checked %d vectors, the fixture file has at least 12", total)
	}
}

// TestVLLMChainKeys checks the chained Keys path (seeded root, block 0 then
// block 1) against the Qwen vectors, i.e. what the request side computes.
func TestVLLMChainKeys(t *testing.T) {
	f := loadVectors(t)
	for model, set := range f.Models {
		byAlgo := map[HashAlgo][]hashVector{}
		for _, v := range set.Fixtures {
			byAlgo[v.Algo] = append(byAlgo[v.Algo], v)
		}
		for algo, vs := range byAlgo {
			var tokens []uint32
			var want []uint64
			for _, v := range vs {
				tokens = append(tokens, v.Tokens...)
				want = append(want, v.WireHash)
			}
			seed := set.Seed
			got, err := EngineKeys(algo, &seed, append(tokens, 7, 8, 9), set.BlockSize)
			if err != nil {
				t.Fatal(err)
			}
			if !equalU64(got, want) {
				t.Errorf("%s %s chain = %v, want %v", model, algo, got, want)
			}
		}
	}
}

func seq(from, to uint32) []uint32 {
	var out []uint32
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// TestSGLangChain pins the SGLang / blockhash_trtllm vectors of
// kv-events.md §2.6.2 (transcribed from LoxiLB's tests, re-verified there).
func TestSGLangChain(t *testing.T) {
	tests := []struct {
		name   string
		bs     int
		tokens []uint32
		want   []int64
	}{
		{"single_block_bs16_noparent", 16, seq(1, 7), []int64{5512803222912486454}},
		{"chain3_bs16", 16, seq(1, 48), []int64{8635429971592222890, 1256577331724852459, 5689809685380680247}},
		{"le_teeth_bs16", 16, []uint32{65537, 2147483646, 2147483647, 2147483648, 4294967295}, []int64{4839613804615831846}},
		{"negative_int64_bs16", 16, []uint32{0}, []int64{-2360060374177730597}},
		{"chain2_bs32", 32, seq(100000, 100063), []int64{476924988540955187, -5051416816229475950}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SGLangChain(tt.tokens, tt.bs)
			want := make([]uint64, len(tt.want))
			for i, w := range tt.want {
				want[i] = uint64(w)
			}
			if !equalU64(got, want) {
				t.Errorf("SGLangChain = %v, want %v", got, want)
			}
		})
	}
}

func TestEngineKeysFullBlocksOnly(t *testing.T) {
	tests := []struct {
		algo HashAlgo
		n    int
		want int
	}{
		{AlgoSHA256SGLang, 47, 2},
		{AlgoBlockHashTRTLLM, 48, 3},
		{AlgoSHA256CBOR, 15, 0},
		{AlgoXXHashCBOR, 33, 2},
	}
	for _, tt := range tests {
		got, err := EngineKeys(tt.algo, nil, seq(1, uint32(tt.n)), 16)
		if err != nil || len(got) != tt.want {
			t.Errorf("EngineKeys(%s, %d tokens) = %d keys, %v; want %d", tt.algo, tt.n, len(got), err, tt.want)
		}
	}
	if _, err := EngineKeys("sha256", nil, seq(1, 16), 16); err == nil {
		t.Error("pickle sha256 must be rejected: it is not reproducible")
	}
}

// TestOwnKeysPinned pins the own-key contract: xxhash64 over the parent key
// (8 bytes LE) then the block's tokens (4 bytes LE each), from RootKey. A
// change here silently empties every live index after an upgrade.
func TestOwnKeysPinned(t *testing.T) {
	want := []uint64{1748081130877304762, 17209809381883871429}
	if got := KeysForTokens(seq(1, 32), 16); !equalU64(got, want) {
		t.Errorf("KeysForTokens(1..32, 16) = %v, want %v", got, want)
	}
	// Reference encoding, written out independently of AppendOwnKeys.
	parent := RootKey
	for b, tokens := range [][]uint32{seq(1, 16), seq(17, 32)} {
		buf := binary.LittleEndian.AppendUint64(nil, parent)
		for _, tok := range tokens {
			buf = binary.LittleEndian.AppendUint32(buf, tok)
		}
		parent = xxhash.Sum64(buf)
		if parent != want[b] {
			t.Errorf("reference key %d = %d, want %d", b, parent, want[b])
		}
	}
}

func TestOwnKeys(t *testing.T) {
	toks := seq(1, 40)
	keys := KeysForTokens(toks, 16)
	if len(keys) != 2 {
		t.Fatalf("KeysForTokens(40 tokens, 16) = %d keys, want 2 full blocks", len(keys))
	}
	// Chaining: block 1's key depends on block 0's tokens.
	other := append([]uint32{99}, toks[1:]...)
	k2 := KeysForTokens(other, 16)
	if k2[0] == keys[0] || k2[1] == keys[1] {
		t.Errorf("own keys are not chained: %v vs %v", keys, k2)
	}
	// Continuing from a parent equals hashing the whole prefix.
	tail := AppendOwnKeys(nil, keys[0], toks[16:32], 16)
	if len(tail) != 1 || tail[0] != keys[1] {
		t.Errorf("AppendOwnKeys from parent = %v, want [%d]", tail, keys[1])
	}
	if got := KeysForTokens(toks, 0); got != nil {
		t.Errorf("block size 0 must yield no keys, got %v", got)
	}
	big := KeysForTokens(seq(1, 600), 300)
	if len(big) != 2 {
		t.Errorf("block size above the stack buffer: %d keys, want 2", len(big))
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
