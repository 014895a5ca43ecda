package kvexact_test

import (
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/infergate/infergate/internal/kvfake"
	"github.com/infergate/infergate/kvexact"
)

func u64p(v uint64) *uint64 { return &v }
func intp(v int) *int       { return &v }

func tokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// sampleBatch holds one of each event kind plus an unknown one.
func sampleBatch(hash uint64) kvfake.Batch {
	return kvfake.Batch{TS: 1789095808.83, Rank: intp(2), Events: []any{
		kvfake.BlockStored{BlockHashes: []uint64{hash, 7}, Parent: u64p(math.MaxUint64), TokenIDs: tokens(1, 32), BlockSize: 16},
		kvfake.Unknown{Tag: "BlockPromoted"},
		kvfake.BlockStored{BlockHashes: []uint64{9}, TokenIDs: nil, BlockSize: 16, Medium: "CPU"},
		kvfake.BlockRemoved{BlockHashes: []uint64{hash}, Medium: "CPU"},
		kvfake.AllBlocksCleared{},
	}}
}

type wantEvent struct {
	Kind      kvexact.EventKind
	Hashes    []uint64
	Parent    uint64
	HasParent bool
	NTokens   int
	BlockSize int
	Medium    kvexact.Medium
}

func summarize(b *kvexact.Batch) []wantEvent {
	var out []wantEvent
	for _, e := range b.Events {
		out = append(out, wantEvent{e.Kind, e.BlockHashes, e.ParentHash, e.HasParent, len(e.TokenIDs), e.BlockSize, e.Medium})
	}
	return out
}

// TestDecodeEncodings decodes the same batch in every encoding vLLM and
// SGLang emit, with every hash wire type, and expects identical events.
func TestDecodeEncodings(t *testing.T) {
	const big = uint64(0xfedcba9876543210) // > int64 max: negative when signed
	want := []wantEvent{
		{kvexact.EventBlockStored, []uint64{big, 7}, math.MaxUint64, true, 32, 16, kvexact.MediumGPU},
		{kvexact.EventBlockStored, []uint64{9}, 0, false, 0, 16, kvexact.MediumCPU},
		{kvexact.EventBlockRemoved, []uint64{big}, 0, false, 0, 0, kvexact.MediumCPU},
		{kvexact.EventAllBlocksCleared, nil, 0, false, 0, 0, kvexact.MediumGPU},
	}
	tests := []struct {
		name string
		enc  kvfake.Encoding
	}{
		{"array/compact", kvfake.Encoding{}},
		{"array/uint64", kvfake.Encoding{Hash: kvfake.HashUint64}},
		{"array/int64", kvfake.Encoding{Hash: kvfake.HashInt64}},
		{"array/bin", kvfake.Encoding{Hash: kvfake.HashBin}},
		{"array/full", kvfake.Encoding{Full: true}},
		{"map/compact", kvfake.Encoding{MapEvents: true}},
		{"map/int64/full", kvfake.Encoding{MapEvents: true, Hash: kvfake.HashInt64, Full: true}},
		{"map/bin", kvfake.Encoding{MapEvents: true, Hash: kvfake.HashBin}},
		{"map-outer/map", kvfake.Encoding{MapOuter: true, MapEvents: true}},
		{"map-outer/array", kvfake.Encoding{MapOuter: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := kvfake.Encode(sampleBatch(big), tt.enc)
			if err != nil {
				t.Fatal(err)
			}
			var b kvexact.Batch
			if err := kvexact.DecodeBatch(raw, &b); err != nil {
				t.Fatalf("DecodeBatch: %v", err)
			}
			if got := summarize(&b); !reflect.DeepEqual(got, want) {
				t.Errorf("events:\n got %+v\nwant %+v", got, want)
			}
			if b.Unknown != 1 || !b.HasRank || b.DPRank != 2 || b.TS != 1789095808.83 {
				t.Errorf("batch: unknown=%d rank=%d/%v ts=%v, want 1, 2/true, 1789095808.83", b.Unknown, b.DPRank, b.HasRank, b.TS)
			}
			if tt.enc.Full && (b.Events[0].SpecKind != kvexact.SpecKindFullAttention || b.Events[0].HasExtraKeys) {
				t.Errorf("full: spec kind %q extra %v", b.Events[0].SpecKind, b.Events[0].HasExtraKeys)
			}
		})
	}
}

// mp builds msgpack by hand for cases the fake encoder cannot express.
func mp(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeIntegerWidths(t *testing.T) {
	// Block hash 5 in every msgpack integer format, signed and unsigned.
	formats := map[string][]byte{
		"fixint": {0x05}, "uint8": {0xcc, 5}, "uint16": {0xcd, 0, 5}, "uint32": {0xce, 0, 0, 0, 5},
		"uint64": {0xcf, 0, 0, 0, 0, 0, 0, 0, 5}, "int8": {0xd0, 5}, "int16": {0xd1, 0, 5},
		"int32": {0xd2, 0, 0, 0, 5}, "int64": {0xd3, 0, 0, 0, 0, 0, 0, 0, 5}, "bin8": {0xc4, 1, 5},
		"str": {0xa2, 0, 5},
	}
	for name, h := range formats {
		t.Run(name, func(t *testing.T) {
			// [ts, [["BlockRemoved", [h]]]]
			raw := append([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x92, 0xac}, "BlockRemoved"...)
			raw = append(append(raw, 0x91), h...)
			var b kvexact.Batch
			if err := kvexact.DecodeBatch(raw, &b); err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != 1 || len(b.Events[0].BlockHashes) != 1 || b.Events[0].BlockHashes[0] != 5 {
				t.Errorf("got %+v, want one BlockRemoved of hash 5", b.Events)
			}
		})
	}
	// Negative fixint and int8 -1 map to all ones (bit-preserving).
	for _, h := range [][]byte{{0xff}, {0xd0, 0xff}} {
		raw := append([]byte{0x92, 0x00, 0x91, 0x92, 0xac}, "BlockRemoved"...)
		raw = append(append(raw, 0x91), h...)
		var b kvexact.Batch
		if err := kvexact.DecodeBatch(raw, &b); err != nil || b.Events[0].BlockHashes[0] != math.MaxUint64 {
			t.Errorf("negative hash %x: %v %+v", h, err, b.Events)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
	}{
		{"empty", nil},
		{"not a batch", mp(t, 42)},
		{"short batch", mp(t, []any{1.0})},
		{"events not array", mp(t, []any{1.0, "x"})},
		{"event not container", mp(t, []any{1.0, []any{7}})},
		{"stored too short", mp(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{1}}}})},
		{"stored hashes not array", mp(t, []any{1.0, []any{[]any{"BlockStored", 1, nil, []any{1}, 16}}})},
		{"removed too short", mp(t, []any{1.0, []any{[]any{"BlockRemoved"}}})},
		{"negative token", mp(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 16}}})},
		{"zero block size", mp(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{1}, 0}}})},
		{"map without type", mp(t, []any{1.0, []any{map[string]any{"block_hashes": []any{1}}}})},
		{"map stored without tokens", mp(t, []any{1.0, []any{map[string]any{"type": "BlockStored", "block_hashes": []any{1}, "block_size": 16}}})},
		{"outer map without events", mp(t, map[string]any{"ts": 1.0})},
		{"huge array length", []byte{0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"truncated", mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1, 2}}}})[:12]},
		{"trailing bytes", append(mp(t, []any{1.0, []any{}}), 0x00)},
		{"invalid format byte", []byte{0x92, 0x00, 0xc1}},
		{"hash is float", mp(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b kvexact.Batch
			err := kvexact.DecodeBatch(tt.raw, &b)
			if !errors.Is(err, kvexact.ErrMalformed) {
				t.Errorf("DecodeBatch(%x) = %v, want ErrMalformed", tt.raw, err)
			}
		})
	}
}

func TestDecodeLenientOptionalFields(t *testing.T) {
	// SGLang appends attn_dp_rank; a 7-element array puts an int where vLLM
	// has medium. Optional positions of the wrong type are skipped.
	raw := mp(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, tokens(0, 16), 16, nil, 3}}, 0})
	var b kvexact.Batch
	if err := kvexact.DecodeBatch(raw, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 1 || b.Events[0].Medium != kvexact.MediumGPU || len(b.Events[0].TokenIDs) != 16 {
		t.Errorf("got %+v", b.Events)
	}
	// An unknown map event whose fields look malformed to us is still skipped.
	raw = mp(t, []any{1.0, []any{map[string]any{"block_hashes": "not-a-list", "type": "BlockPromoted"}, []any{"AllBlocksCleared"}}})
	if err := kvexact.DecodeBatch(raw, &b); err != nil || b.Unknown != 1 || len(b.Events) != 1 {
		t.Errorf("unknown malformed map event: err=%v unknown=%d events=%d", err, b.Unknown, len(b.Events))
	}
	// Unknown map keys are ignored, key order is free, extra_keys non-nil is flagged.
	raw = mp(t, []any{1.0, []any{map[string]any{
		"new_field": map[string]any{"a": []any{1, 2}}, "block_size": 16, "token_ids": tokens(0, 16),
		"extra_keys": []any{[]any{"lora-a"}}, "block_hashes": []any{uint64(math.MaxUint64)}, "type": "BlockStored", "medium": "GPU",
	}}})
	if err := kvexact.DecodeBatch(raw, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 1 || !b.Events[0].HasExtraKeys || b.Events[0].BlockHashes[0] != math.MaxUint64 {
		t.Errorf("got %+v", b.Events)
	}
}

func TestDecodeMessage(t *testing.T) {
	payload := mp(t, []any{1.0, []any{[]any{"AllBlocksCleared"}}})
	seq := binary.BigEndian.AppendUint64(nil, 42)
	tests := []struct {
		name    string
		frames  [][]byte
		wantErr bool
	}{
		{"ok", [][]byte{[]byte("kv@10.0.0.1:8000@m"), seq, payload}, false},
		{"two frames", [][]byte{seq, payload}, true},
		{"short seq", [][]byte{nil, seq[:7], payload}, true},
		{"bad payload", [][]byte{nil, seq, {0xc1}}, true},
	}
	for _, tt := range tests {
		var m kvexact.Message
		var b kvexact.Batch
		err := kvexact.DecodeMessage(tt.frames, &m, &b)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err = %v, wantErr %v", tt.name, err, tt.wantErr)
		}
		if err == nil && (m.Seq != 42 || m.Topic != "kv@10.0.0.1:8000@m" || len(b.Events) != 1) {
			t.Errorf("%s: got %+v %+v", tt.name, m, b.Events)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, enc := range []kvfake.Encoding{{}, {MapEvents: true, Full: true}, {Hash: kvfake.HashBin}, {MapOuter: true, Hash: kvfake.HashInt64}} {
		raw, err := kvfake.Encode(sampleBatch(12345), enc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte{0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var b kvexact.Batch
		if err := kvexact.DecodeBatch(raw, &b); err != nil {
			if !errors.Is(err, kvexact.ErrMalformed) {
				t.Fatalf("error not wrapped as ErrMalformed: %v", err)
			}
			return
		}
		for _, e := range b.Events {
			if e.Kind < kvexact.EventBlockStored || e.Kind > kvexact.EventAllBlocksCleared {
				t.Fatalf("decoded event of kind %d", e.Kind)
			}
		}
	})
}

// TestDecodeVLLM026Capture decodes the shape captured from vLLM v0.26.0
// (kv-events.md §1.5): map event, every optional field present, nil LoRA.
func TestDecodeVLLM026Capture(t *testing.T) {
	toks := []any{151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198, 151667, 271}
	raw := mp(t, []any{1789095808.83, []any{map[string]any{
		"type": "BlockStored", "block_hashes": []any{uint64(15760518052499183552)}, "parent_block_hash": nil,
		"token_ids": toks, "block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil,
		"extra_keys": []any{nil}, "group_idx": 0, "kv_cache_spec_kind": "full_attention",
	}}, 0})
	var b kvexact.Batch
	if err := kvexact.DecodeBatch(raw, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 1 {
		t.Fatalf("events = %d, want 1", len(b.Events))
	}
	e := b.Events[0]
	switch {
	case e.Kind != kvexact.EventBlockStored, len(e.BlockHashes) != 1, e.BlockHashes[0] != 15760518052499183552,
		e.HasParent, len(e.TokenIDs) != 16, e.TokenIDs[0] != 151644, e.BlockSize != 16, e.HasLoraID,
		e.Medium != kvexact.MediumGPU, e.LoraName != "", e.HasExtraKeys, !e.HasGroup, e.GroupIdx != 0,
		e.SpecKind != kvexact.SpecKindFullAttention, !b.HasRank, b.DPRank != 0:
		t.Errorf("decoded %+v (rank %d/%v)", e, b.DPRank, b.HasRank)
	}
}
