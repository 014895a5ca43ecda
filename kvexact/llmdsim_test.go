package kvexact_test

import (
	"encoding/binary"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/infergate/infergate/kvexact"
)

// The wire shape of llm-d's inference simulator (llm-d-inference-sim,
// docs/kv-cache.md), a publisher nobody here wrote, in its default
// ("legacy") encoding: the batch is a positional array [ts, events,
// data_parallel_rank] whose rank is nil for a single instance, and every
// event a positional array with all its optional trailing slots present
// as nil. A BlockStored with no cached prefix carries parent 0, not nil;
// with a cached prefix, the hash of the last cached block.
type simBatch struct {
	_msgpack struct{} `msgpack:",as_array"` //nolint:unused
	TS       float64
	Events   []msgpack.RawMessage
	Rank     *int
}

type simStored struct {
	_msgpack  struct{} `msgpack:",as_array"` //nolint:unused
	Tag       string
	Hashes    []any // uint64 on the wire
	Parent    any
	TokenIDs  []uint32
	BlockSize int
	LoraID    *int
	Medium    *string
	LoraName  *string
	ExtraKeys []any
}

type simRemoved struct {
	_msgpack struct{} `msgpack:",as_array"` //nolint:unused
	Tag      string
	Hashes   []any
	Medium   *string
}

func simMessage(t *testing.T, seq uint64, events ...any) [][]byte {
	t.Helper()
	var raw []msgpack.RawMessage
	for _, e := range events {
		b, err := msgpack.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, b)
	}
	payload, err := msgpack.Marshal(simBatch{TS: 1789095808.83, Events: raw})
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{[]byte("kv@127.0.0.1:28101@sim-8b"), binary.BigEndian.AppendUint64(nil, seq), payload}
}

// TestLLMDSimulatorWireShape: the simulator's events decode, index under
// the keys the request side computes from the same token ids, chain a
// store onto its cached prefix, and remove blocks by engine hash.
func TestLLMDSimulatorWireShape(t *testing.T) {
	gpu := "GPU"
	hashes := func(hs ...uint64) []any {
		out := make([]any, len(hs))
		for i, h := range hs {
			out[i] = h
		}
		return out
	}
	prompt := tokens(7000, 64) // four blocks of 16
	const a = "127.0.0.1:28101"

	inv := kvexact.NewInventory(kvexact.DefaultOptions("sim"))
	if err := inv.SetConnected(a, 0, true); err != nil {
		t.Fatal(err)
	}
	apply := func(frames [][]byte) {
		t.Helper()
		var m kvexact.Message
		var b kvexact.Batch
		if err := kvexact.DecodeMessage(frames, &m, &b); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if b.HasRank {
			t.Fatalf("a nil data_parallel_rank read as rank %d", b.DPRank)
		}
		inv.Apply(a, 0, m.Seq, b)
	}
	held := func() int {
		t.Helper()
		keys := kvexact.KeysForTokens(prompt, 16)
		return inv.Score(keys, []string{a})[0].Blocks
	}

	// First request: no cached prefix, parent 0; two full blocks.
	apply(simMessage(t, 1, simStored{Tag: kvexact.TagBlockStored, Hashes: hashes(0xa1, 0xa2), Parent: uint64(0),
		TokenIDs: prompt[:32], BlockSize: 16, Medium: &gpu}))
	if got := held(); got != 2 {
		t.Fatalf("after the first store the engine holds %d blocks of the prompt, want 2", got)
	}
	// Second request extends it: parent is the last cached block's hash.
	apply(simMessage(t, 2, simStored{Tag: kvexact.TagBlockStored, Hashes: hashes(0xa3, 0xa4), Parent: uint64(0xa2),
		TokenIDs: prompt[32:], BlockSize: 16, Medium: &gpu}))
	if got := held(); got != 4 {
		t.Fatalf("after the chained store the engine holds %d blocks, want 4", got)
	}
	// Eviction of the third block cuts the held prefix there.
	apply(simMessage(t, 3, simRemoved{Tag: kvexact.TagBlockRemoved, Hashes: hashes(0xa3), Medium: &gpu}))
	if got := held(); got != 2 {
		t.Fatalf("after removing block 2 the engine holds %d blocks, want 2", got)
	}
}
