package trtpoll

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/metrics"
)

// PathKVCacheEvents is TensorRT-LLM's destructive event drain.
const PathKVCacheEvents = "/kv_cache_events"

// PathServerInfo reports the engine's KV settings (tensorrt_llm ≥ 1.3.0rc24).
const PathServerInfo = "/server_info"

// FieldTokensPerBlock is /server_info's block size.
const FieldTokensPerBlock = "tokens_per_block"

// ResultRejected counts polls skipped because the engine's
// tokens_per_block differs from kvBlockSize.
const ResultRejected = "rejected"

// Wire names of the TensorRT-LLM event envelope (kv-events.md §1.8).
const (
	FieldEventID     = "event_id"
	FieldWindowSize  = "window_size"
	FieldData        = "data"
	FieldType        = "type"
	FieldParentHash  = "parent_hash"
	FieldBlocks      = "blocks"
	FieldBlockHash   = "block_hash"
	FieldBlockHashes = "block_hashes"
	FieldTokens      = "tokens"
	FieldTokenID     = "token_id"
	FieldCacheSalt   = "cache_salt"
	FieldMMKeys      = "mm_keys"
	FieldCacheLevel  = "cache_level"

	TypeStored  = "stored"
	TypeRemoved = "removed"
	TypeCreated = "created"
	TypeUpdated = "updated"
)

// Sink is the inventory surface the poller feeds; *kvexact.Inventory
// implements it.
type Sink interface {
	Apply(endpoint string, rank int, seq uint64, batch kvexact.Batch) kvexact.ApplyResult
	SetConnected(endpoint string, rank int, connected bool) error
}

// Target is one TensorRT-LLM endpoint.
type Target struct {
	Endpoint string // inventory key, "ip:port"
	URL      string // serving base URL, e.g. "http://10.0.0.1:8000"
}

// Defaults of Options.
const (
	DefaultInterval    = 20 * time.Millisecond
	DefaultTimeout     = 30 * time.Second
	DefaultMaxResponse = 64 << 20
	DefaultRecheck     = time.Minute
)

// Options configures pollers.
type Options struct {
	Rule string
	// Interval is the pause between drains.
	Interval time.Duration
	// Timeout bounds one drain (older engines block ~2 s on an idle poll).
	Timeout time.Duration
	// BlockSize is kvBlockSize, TensorRT-LLM's tokens_per_block.
	BlockSize int
	// RecheckInterval is how often an engine refused for a block-size
	// mismatch is asked /server_info again.
	RecheckInterval time.Duration
	MaxResponse     int64
	Client          *http.Client
	Metrics         *metrics.KVRouting
	Logger          logrus.FieldLogger
}

// DefaultOptions returns the defaults for rule.
func DefaultOptions(rule string) Options {
	return Options{Rule: rule, Interval: DefaultInterval, Timeout: DefaultTimeout,
		BlockSize: kvexact.DefaultBlockSize, MaxResponse: DefaultMaxResponse, RecheckInterval: DefaultRecheck}
}

// Envelope is one TensorRT-LLM KV event.
type Envelope struct {
	EventID    uint64          `json:"event_id"`
	WindowSize *int            `json:"window_size"`
	Data       json.RawMessage `json:"data"`
}

type eventData struct {
	Type        string          `json:"type"`
	ParentHash  *json.Number    `json:"parent_hash"`
	Blocks      []storedBlock   `json:"blocks"`
	BlockHashes []json.Number   `json:"block_hashes"`
	CacheLevel  *int            `json:"cache_level"`
	Extra       json.RawMessage `json:"-"`
}

type storedBlock struct {
	BlockHash  json.Number     `json:"block_hash"`
	Tokens     []token         `json:"tokens"`
	CacheSalt  json.RawMessage `json:"cache_salt"`
	MMKeys     json.RawMessage `json:"mm_keys"`
	CacheLevel int             `json:"cache_level"`
}

type token struct {
	TokenID uint32 `json:"token_id"`
}

// Decode parses a drain response: a JSON array of envelopes.
func Decode(body []byte) ([]Envelope, error) {
	var envs []Envelope
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&envs); err != nil {
		return nil, fmt.Errorf("trtpoll: decode events: %w", err)
	}
	return envs, nil
}

// Converter turns envelopes into inventory batches. It pins the first
// window size it sees.
type Converter struct {
	BlockSize int
	window    int
	mu        sync.Mutex
}

// Convert fills b with env's event and returns the sequence to apply it
// at. Events of another window, undecodable data and "updated" moves become
// empty batches, so the sequence stays contiguous and only real losses read
// as gaps; ok is reserved for events that must not be applied at all.
func (c *Converter) Convert(env *Envelope, b *kvexact.Batch) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b.Reset()
	var d eventData
	dec := json.NewDecoder(bytes.NewReader(env.Data))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return env.EventID, true // an unreadable event still advances the sequence
	}
	if env.WindowSize != nil {
		if c.window == 0 {
			c.window = *env.WindowSize
		}
		if *env.WindowSize != c.window {
			return env.EventID, true
		}
	}
	switch d.Type {
	case TypeCreated:
		b.Events = append(b.Events, kvexact.Event{Kind: kvexact.EventAllBlocksCleared})
	case TypeRemoved:
		ev := kvexact.Event{Kind: kvexact.EventBlockRemoved}
		for _, h := range d.BlockHashes {
			if v, ok := parseHash(h); ok {
				ev.BlockHashes = append(ev.BlockHashes, v)
			}
		}
		b.Events = append(b.Events, ev)
	case TypeStored:
		c.stored(&d, b)
	default:
		b.Unknown += boolInt(d.Type != TypeUpdated)
	}
	return env.EventID, true
}

// stored converts a "stored" event: the leading run of full blocks without
// salt or multimodal keys (a chain cannot continue past a skipped block).
func (c *Converter) stored(d *eventData, b *kvexact.Batch) {
	ev := kvexact.Event{Kind: kvexact.EventBlockStored, BlockSize: c.BlockSize}
	if d.ParentHash != nil {
		if v, ok := parseHash(*d.ParentHash); ok {
			ev.ParentHash, ev.HasParent = v, true
		}
	}
	for _, blk := range d.Blocks {
		if len(blk.Tokens) != c.BlockSize || present(blk.CacheSalt) || nonEmptyList(blk.MMKeys) {
			break
		}
		h, ok := parseHash(blk.BlockHash)
		if !ok {
			break
		}
		ev.BlockHashes = append(ev.BlockHashes, h)
		for _, t := range blk.Tokens {
			ev.TokenIDs = append(ev.TokenIDs, t.TokenID)
		}
		if blk.CacheLevel != 0 {
			ev.Medium = kvexact.MediumCPU
		}
	}
	if len(ev.BlockHashes) > 0 {
		b.Events = append(b.Events, ev)
	}
}

// parseHash reads an engine hash that may exceed int64 (carried as uint64)
// or be negative (two's complement).
func parseHash(n json.Number) (uint64, bool) {
	var u uint64
	if _, err := fmt.Sscan(string(n), &u); err == nil {
		return u, true
	}
	var i int64
	if _, err := fmt.Sscan(string(n), &i); err == nil {
		return uint64(i), true
	}
	return 0, false
}

func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

func nonEmptyList(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != "[]"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
