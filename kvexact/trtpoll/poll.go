package trtpoll

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// Poller drains one endpoint.
type Poller struct {
	t      Target
	sink   Sink
	o      Options
	cancel context.CancelFunc
	done   chan struct{}
	conv   Converter
}

// Start begins draining target into sink.
func Start(t Target, sink Sink, o Options) *Poller {
	d := DefaultOptions(o.Rule)
	if o.Interval <= 0 {
		o.Interval = d.Interval
	}
	if o.Timeout <= 0 {
		o.Timeout = d.Timeout
	}
	if o.BlockSize <= 0 {
		o.BlockSize = d.BlockSize
	}
	if o.MaxResponse <= 0 {
		o.MaxResponse = d.MaxResponse
	}
	if o.RecheckInterval <= 0 {
		o.RecheckInterval = d.RecheckInterval
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	}
	if o.Logger == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.Logger = l
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Poller{t: t, sink: sink, o: o, cancel: cancel, done: make(chan struct{}), conv: Converter{BlockSize: o.BlockSize}}
	go p.run(ctx)
	return p
}

// Close stops the poller and waits for it.
func (p *Poller) Close() error {
	p.cancel()
	<-p.done
	p.o.Client.CloseIdleConnections()
	return nil
}

func (p *Poller) run(ctx context.Context) {
	defer close(p.done)
	log := p.o.Logger.WithFields(logrus.Fields{"rule": p.o.Rule, "endpoint": p.t.Endpoint})
	connected, failing, admitted, warned := false, false, false, false
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if connected {
				_ = p.sink.SetConnected(p.t.Endpoint, 0, false)
			}
			return
		case <-tick.C:
		}
		if !admitted {
			// Admission: an engine whose blocks are another size would
			// publish blocks no request key can match, so it is not drained
			// (draining is destructive) until its settings agree.
			size, known := p.serverBlockSize(ctx)
			if ctx.Err() != nil {
				continue
			}
			if known && size != p.o.BlockSize {
				if !warned {
					log.WithFields(logrus.Fields{"tokens_per_block": size, "kvBlockSize": p.o.BlockSize}).
						Warn("trtpoll: engine block size differs from kvBlockSize; its KV events are not drained")
					warned = true
				}
				if m := p.o.Metrics; m != nil {
					m.TRTPolls.WithLabelValues(p.o.Rule, p.t.Endpoint, ResultRejected).Inc()
				}
				tick.Reset(p.o.RecheckInterval)
				continue
			}
			admitted = true
		}
		body, err := p.drain(ctx)
		if ctx.Err() != nil {
			continue
		}
		result := metrics.ResultOK
		if err == nil {
			var n int
			n, err = p.apply(body, &connected)
			if err == nil && failing {
				log.WithField("events", n).Info("trtpoll: draining KV events again")
				failing = false
			}
		}
		if err != nil {
			result = metrics.ResultError
			if connected {
				_ = p.sink.SetConnected(p.t.Endpoint, 0, false)
				connected = false
			}
			if !failing {
				log.WithError(err).Warn("trtpoll: KV event drain failed; the endpoint's inventory is untrusted until drains succeed")
				failing = true
			}
		}
		if m := p.o.Metrics; m != nil {
			m.TRTPolls.WithLabelValues(p.o.Rule, p.t.Endpoint, result).Inc()
		}
		tick.Reset(p.o.Interval)
	}
}

// serverBlockSize asks /server_info for tokens_per_block; known is false
// when the engine does not say (older builds, unreachable): those are
// admitted and the drain itself reports what is wrong.
func (p *Poller) serverBlockSize(ctx context.Context) (size int, known bool) {
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.t.URL+PathServerInfo, nil)
	if err != nil {
		return 0, false
	}
	resp, err := p.o.Client.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return 0, false
	}
	var info map[string]json.RawMessage
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info) != nil {
		return 0, false
	}
	if err := json.Unmarshal(info[FieldTokensPerBlock], &size); err != nil || size <= 0 {
		return 0, false
	}
	return size, true
}

func (p *Poller) drain(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.t.URL+PathKVCacheEvents, bytes.NewReader([]byte("{}")))
	if err != nil {
		return nil, fmt.Errorf("trtpoll: request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.o.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("trtpoll: drain %s: %w", p.t.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("trtpoll: drain %s: status %d", p.t.URL, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.o.MaxResponse))
	if err != nil {
		return nil, fmt.Errorf("trtpoll: read drain of %s: %w", p.t.URL, err)
	}
	return body, nil
}

func (p *Poller) apply(body []byte, connected *bool) (int, error) {
	envs, err := Decode(body)
	if err != nil {
		return 0, err
	}
	if !*connected {
		_ = p.sink.SetConnected(p.t.Endpoint, 0, true)
		*connected = true
	}
	var b kvexact.Batch
	for i := range envs {
		seq, ok := p.conv.Convert(&envs[i], &b)
		if !ok {
			continue
		}
		if res := p.sink.Apply(p.t.Endpoint, 0, seq, b); res.Err != nil {
			return i, fmt.Errorf("trtpoll: apply: %w", res.Err)
		}
	}
	return len(envs), nil
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
