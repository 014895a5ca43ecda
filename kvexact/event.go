package kvexact

// Wire names of the vLLM/SGLang KV-event msgpack schema (kv-events.md §1.4–1.5).
const (
	TagBlockStored      = "BlockStored"
	TagBlockRemoved     = "BlockRemoved"
	TagAllBlocksCleared = "AllBlocksCleared"

	FieldType             = "type"
	FieldTS               = "ts"
	FieldEvents           = "events"
	FieldDataParallelRank = "data_parallel_rank"
	FieldBlockHashes      = "block_hashes"
	FieldParentBlockHash  = "parent_block_hash"
	FieldTokenIDs         = "token_ids"
	FieldBlockSize        = "block_size"
	FieldLoraID           = "lora_id"
	FieldMedium           = "medium"
	FieldLoraName         = "lora_name"
	FieldExtraKeys        = "extra_keys"
	FieldGroupIdx         = "group_idx"
	FieldSpecKind         = "kv_cache_spec_kind"
	FieldSpecSlidingWin   = "kv_cache_spec_sliding_window"

	MediumNameGPU = "GPU"
	MediumNameCPU = "CPU"

	// SpecKindFullAttention is the only kv_cache_spec_kind own keys are built
	// from; sliding-window groups publish the same hashes with other residency.
	SpecKindFullAttention = "full_attention"
)

// Positions of BlockStored fields in the array encoding (tag at 0).
const (
	posStoredHashes = 1 + iota
	posStoredParent
	posStoredTokens
	posStoredBlockSize
	posStoredLoraID
	posStoredMedium
	posStoredLoraName
	posStoredExtraKeys
	posStoredGroupIdx
	posStoredSpecKind
	posStoredSpecSlidingWin
)

// Positions of BlockRemoved fields in the array encoding.
const (
	posRemovedHashes = 1 + iota
	posRemovedMedium
	posRemovedGroupIdx
)

// minStoredLen and minRemovedLen are the shortest valid array events.
const (
	minStoredLen  = posStoredBlockSize + 1
	minRemovedLen = posRemovedHashes + 1
)

// EventKind is the decoded event tag.
type EventKind uint8

const (
	EventBlockStored EventKind = iota + 1
	EventBlockRemoved
	EventAllBlocksCleared
)

func (k EventKind) String() string {
	switch k {
	case EventBlockStored:
		return TagBlockStored
	case EventBlockRemoved:
		return TagBlockRemoved
	case EventAllBlocksCleared:
		return TagAllBlocksCleared
	}
	return "unknown"
}

// Medium is the storage tier of a block ("medium" on the wire).
type Medium uint8

const (
	MediumGPU   Medium = iota // also nil/absent: vLLM's GPU cache
	MediumCPU                 // offload tier
	MediumOther               // disk or anything newer: not indexed
)

func (m Medium) String() string {
	switch m {
	case MediumGPU:
		return MediumNameGPU
	case MediumCPU:
		return MediumNameCPU
	}
	return "other"
}

// Event is one decoded KV event. Slices alias the Batch's arenas and are
// valid until the Batch is decoded into again.
type Event struct {
	Kind        EventKind
	BlockHashes []uint64 // engine hashes, bit-preserving (signed SGLang values wrap)
	ParentHash  uint64
	HasParent   bool // false: chain root (parent_block_hash nil/absent)
	TokenIDs    []uint32
	BlockSize   int
	LoraID      int64
	HasLoraID   bool
	LoraName    string
	Medium      Medium
	GroupIdx    int    // KV-cache group (hybrid models publish one event per group)
	HasGroup    bool   // group_idx present and non-nil
	SpecKind    string // kv_cache_spec_kind, "" when absent
	// HasExtraKeys is true when any block carries non-nil extra keys (LoRA,
	// multimodal, salt): such blocks cannot be keyed from tokens alone.
	HasExtraKeys bool
}

// Batch is one decoded msgpack event batch. Reuse a Batch across decodes to
// keep ingest allocation-free.
type Batch struct {
	TS      float64
	Events  []Event
	DPRank  int
	HasRank bool
	// Unknown counts events with an unknown tag, skipped without failing the batch.
	Unknown int

	hashes []uint64
	tokens []uint32
}

// Reset empties b keeping its buffers.
func (b *Batch) Reset() {
	b.TS, b.DPRank, b.HasRank, b.Unknown = 0, 0, false, 0
	b.Events = b.Events[:0]
	b.hashes = b.hashes[:0]
	b.tokens = b.tokens[:0]
}
