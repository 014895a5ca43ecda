package kvfake

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Wire names of the vLLM KV-event schema, spelled independently of
// kvexact so that the fake can catch a decoder that drifts from the wire.
const (
	tagBlockStored      = "BlockStored"
	tagBlockRemoved     = "BlockRemoved"
	tagAllBlocksCleared = "AllBlocksCleared"

	keyType       = "type"
	keyTS         = "ts"
	keyEvents     = "events"
	keyRank       = "data_parallel_rank"
	keyHashes     = "block_hashes"
	keyParent     = "parent_block_hash"
	keyTokens     = "token_ids"
	keyBlockSize  = "block_size"
	keyLoraID     = "lora_id"
	keyMedium     = "medium"
	keyLoraName   = "lora_name"
	keyExtraKeys  = "extra_keys"
	keyGroupIdx   = "group_idx"
	keySpecKind   = "kv_cache_spec_kind"
	fullAttention = "full_attention"
	mediumGPU     = "GPU"
)

// HashWire selects how block hashes are put on the wire (kv-events.md §1.7).
type HashWire uint8

const (
	HashCompact HashWire = iota // shortest unsigned int (vLLM default)
	HashUint64                  // always uint64 (0xcf)
	HashInt64                   // signed int64 (SGLang), two's complement
	HashBin                     // 32-byte bin, value in the last 8 bytes (vLLM bytes mode)
)

// Encoding selects the event and batch shapes.
type Encoding struct {
	MapEvents bool     // vLLM ≥ 0.26: events as maps with "type"
	MapOuter  bool     // hypothetical map outer batch
	Hash      HashWire // hash wire type
	Full      bool     // emit every optional field (arrays up to kv_cache_spec_kind)
}

// BlockStored is a BlockStored event.
type BlockStored struct {
	BlockHashes []uint64
	Parent      *uint64
	TokenIDs    []uint32
	BlockSize   int
	Medium      string // "" → GPU
	LoraName    string
	GroupIdx    int
}

// BlockRemoved is a BlockRemoved event.
type BlockRemoved struct {
	BlockHashes []uint64
	Medium      string
}

// AllBlocksCleared is an AllBlocksCleared event.
type AllBlocksCleared struct{}

// Unknown is an event with a tag the gateway does not know.
type Unknown struct{ Tag string }

// Batch is one event batch; Rank nil omits data_parallel_rank.
type Batch struct {
	TS     float64
	Events []any
	Rank   *int
}

// Encode renders b as msgpack in the requested encoding.
func Encode(b Batch, enc Encoding) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	w := &writer{e: e, enc: enc}
	n := 2
	if b.Rank != nil {
		n = 3
	}
	if enc.MapOuter {
		w.check(e.EncodeMapLen(n))
		w.str(keyTS)
	} else {
		w.check(e.EncodeArrayLen(n))
	}
	w.check(e.EncodeFloat64(b.TS))
	if enc.MapOuter {
		w.str(keyEvents)
	}
	w.check(e.EncodeArrayLen(len(b.Events)))
	for _, ev := range b.Events {
		w.event(ev)
	}
	if b.Rank != nil {
		if enc.MapOuter {
			w.str(keyRank)
		}
		w.check(e.EncodeInt(int64(*b.Rank)))
	}
	if w.err != nil {
		return nil, fmt.Errorf("kvfake: encode batch: %w", w.err)
	}
	return buf.Bytes(), nil
}

type writer struct {
	e   *msgpack.Encoder
	enc Encoding
	err error
}

func (w *writer) check(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) str(s string) { w.check(w.e.EncodeString(s)) }

func (w *writer) hash(h uint64) {
	switch w.enc.Hash {
	case HashUint64:
		w.check(w.e.EncodeUint64(h))
	case HashInt64:
		w.check(w.e.EncodeInt64(int64(h)))
	case HashBin:
		b := make([]byte, 32)
		binary.BigEndian.PutUint64(b[24:], h)
		b[0] = 0xaa // digest bytes the gateway must ignore
		w.check(w.e.EncodeBytes(b))
	default:
		w.check(w.e.EncodeUint(h))
	}
}

func (w *writer) hashes(hs []uint64) {
	w.check(w.e.EncodeArrayLen(len(hs)))
	for _, h := range hs {
		w.hash(h)
	}
}

// field starts a field: a key in map mode, nothing in array mode.
func (w *writer) field(name string) {
	if w.enc.MapEvents {
		w.str(name)
	}
}

func (w *writer) event(ev any) {
	e := w.e
	switch ev := ev.(type) {
	case BlockStored:
		medium := ev.Medium
		if medium == "" {
			medium = mediumGPU
		}
		n := 7 // tag + hashes, parent, tokens, block_size, lora_id, medium
		if w.enc.Full {
			n = 11 // + lora_name, extra_keys, group_idx, kv_cache_spec_kind
		}
		w.head(n, tagBlockStored)
		w.field(keyHashes)
		w.hashes(ev.BlockHashes)
		w.field(keyParent)
		if ev.Parent == nil {
			w.check(e.EncodeNil())
		} else {
			w.hash(*ev.Parent)
		}
		w.field(keyTokens)
		w.check(e.EncodeArrayLen(len(ev.TokenIDs)))
		for _, t := range ev.TokenIDs {
			w.check(e.EncodeUint(uint64(t)))
		}
		w.field(keyBlockSize)
		w.check(e.EncodeInt(int64(ev.BlockSize)))
		w.field(keyLoraID)
		w.check(e.EncodeNil())
		w.field(keyMedium)
		w.str(medium)
		if w.enc.Full {
			w.field(keyLoraName)
			if ev.LoraName == "" {
				w.check(e.EncodeNil())
			} else {
				w.str(ev.LoraName)
			}
			w.field(keyExtraKeys)
			w.check(e.EncodeArrayLen(len(ev.BlockHashes)))
			for range ev.BlockHashes {
				w.check(e.EncodeNil())
			}
			w.field(keyGroupIdx)
			w.check(e.EncodeInt(int64(ev.GroupIdx)))
			w.field(keySpecKind)
			w.str(fullAttention)
		}
	case BlockRemoved:
		medium := ev.Medium
		if medium == "" {
			medium = mediumGPU
		}
		w.head(3, tagBlockRemoved)
		w.field(keyHashes)
		w.hashes(ev.BlockHashes)
		w.field(keyMedium)
		w.str(medium)
	case AllBlocksCleared:
		w.head(1, tagAllBlocksCleared)
	case Unknown:
		w.head(2, ev.Tag)
		w.field("payload")
		w.check(e.EncodeArrayLen(2))
		w.check(e.EncodeInt(1))
		w.str("x")
	default:
		w.check(fmt.Errorf("unsupported event %T", ev))
	}
}

// head writes the event container and its tag; n counts the tag.
func (w *writer) head(n int, tag string) {
	if w.enc.MapEvents {
		w.check(w.e.EncodeMapLen(n))
		w.str(keyType)
	} else {
		w.check(w.e.EncodeArrayLen(n))
	}
	w.str(tag)
}
