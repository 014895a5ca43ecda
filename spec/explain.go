package spec

// The routing explanation: a dry run of routing one request (what each
// selection step would decide and why, with the candidates' state), and the
// KV-exact inventory rows. These are views the API serves and the CLI
// prints; the datapath fills them. They live here, beside the compiled rule,
// so the API renders them without importing the datapath.

// Outcomes of an Explanation.
const (
	ExplainPair        = "pair"                // a (prefill, decode) pair would serve it
	ExplainFallback    = "role0_fallback"      // a role-0 endpoint would serve it unsplit
	ExplainUnavailable = "pd_pool_unavailable" // 503
	ExplainRelay       = "relay"               // body-less P/D request: plain relay to a prefill
	ExplainSingle      = "single"              // single-pool rule
)

// Explanation is a dry run of routing one request: what each tier would
// decide and why, with the candidates' state. Producing it has no side
// effects (no session pinned or slid, nothing learned, no breaker slot
// taken).
type Explanation struct {
	Rule     string `json:"rule"`
	Engine   string `json:"engine,omitempty"`
	PD       bool   `json:"pd"`
	Selector string `json:"selector"`
	Outcome  string `json:"outcome"`
	// HasSessionKey: the request carries a Tier 0 key (X-Conversation-Id
	// or body "user"); the key itself is not echoed.
	HasSessionKey bool           `json:"has_session_key"`
	Steps         []ExplainStep  `json:"steps"`
	Prefill       string         `json:"prefill,omitempty"`
	Decode        string         `json:"decode,omitempty"`
	Endpoint      string         `json:"endpoint,omitempty"` // single pool (CHWBL, KV mode 3) when predictable
	Candidates    []ExplainEntry `json:"candidates"`
	// Prefix is Tier 1's view (cache-aware P/D rules).
	Prefix *PrefixExplain `json:"prefix,omitempty"`
	// KVScores is Tier 1.5's per-candidate view (kvExactMode 1 and 3).
	KVScores []CandidateScore `json:"kv_scores,omitempty"`
	KVReason string           `json:"kv_reason,omitempty"`
	// Estimates is the cost model's estimated time to first token on each
	// P/D prefill candidate, priced cold (as the load rung prices a miss;
	// KVScores carries the cache-aware estimates). Empty without a cost
	// model (--kv-legacy-load-guard).
	Estimates []CandidateEstimate `json:"estimates,omitempty"`
	// Queue is the rule's gateway queue now (a request finding every
	// endpoint at its window waits there); nil without windows.
	Queue *QueueStatus `json:"queue,omitempty"`
	Note  string       `json:"note,omitempty"`
}

// ExplainStep is one tier's verdict.
type ExplainStep struct {
	Tier   string `json:"tier"`
	Hit    bool   `json:"hit"`
	Reason string `json:"reason,omitempty"`
	Choice string `json:"choice,omitempty"`
}

// ExplainEntry is one endpoint as routing sees it now.
type ExplainEntry struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Weight  int    `json:"weight"`
	Health  string `json:"health"`
	Breaker string `json:"breaker"`
	Load    int64  `json:"load"`
	Usable  bool   `json:"usable"`
	// Engine summarises the engine's own load (scraped; EngineStatus.Summary);
	// empty when the endpoint is not scraped.
	Engine string `json:"engine,omitempty"`
	// Window is the endpoint's admission window occupancy
	// (WindowStatus.Summary: "in flight/limit", ",full" at the window);
	// empty when the rule sets no window.
	Window string `json:"window,omitempty"`
}

// PrefixExplain is Tier 1's (prefix affinity) view of one request: what
// matched, how much, and why it did or did not win.
type PrefixExplain struct {
	Hit          bool    `json:"hit"`
	Reason       string  `json:"reason,omitempty"`   // fall-through reason when !Hit
	Endpoint     string  `json:"endpoint,omitempty"` // longest-prefix owner: a candidate, or the excluded owner (pinned_endpoint_excluded)
	MatchedBytes int     `json:"matched_bytes"`
	KeyBytes     int     `json:"key_bytes"`
	Rate         float64 `json:"match_rate"`        // MatchedBytes / KeyBytes (key clipped to the index's cap)
	Threshold    int     `json:"threshold_percent"` // pd_cache_threshold
	Load         int     `json:"load"`              // load of Endpoint
	MinLoad      int     `json:"min_load"`          // least loaded candidate's load
	BalanceAbs   int     `json:"balance_abs"`       // pd_balance_abs_threshold
}

// CandidateScore is one candidate's Tier 1.5 (KV-exact) view.
type CandidateScore struct {
	ID        string `json:"id"`
	Load      int    `json:"load"`
	Blocks    int    `json:"blocks"`
	GPUBlocks int    `json:"gpu_blocks"`
	CPUBlocks int    `json:"cpu_blocks"`
	// PendingBlocks are the leading blocks this gateway sent the candidate
	// within the pending TTL (--kv-pending-ttl), whether or not its events
	// show them yet (0 on an untrusted candidate); the score counts the
	// larger of these and the published blocks.
	PendingBlocks int     `json:"pending_blocks,omitempty"`
	Score         float64 `json:"score"`
	Trusted       bool    `json:"trusted"`
	Untrusted     string  `json:"untrusted_reason,omitempty"`
	// EstimateMs is the cost model's estimated time to first token on
	// this candidate (queue + uncached prefill); 0 without a cost model.
	EstimateMs float64 `json:"estimate_ms,omitempty"`
	// The estimate by term: the engine's queue, the prefill this gateway
	// sent it that is not done yet, this request's uncached prefill, and
	// the KV cache saturation penalty.
	QueueMs      float64 `json:"queue_ms,omitempty"`
	BacklogMs    float64 `json:"backlog_ms,omitempty"`
	PrefillMs    float64 `json:"prefill_ms,omitempty"`
	SaturationMs float64 `json:"saturation_ms,omitempty"`
}

// CandidateEstimate is one candidate's estimated time to first token and
// its terms (see CandidateScore).
type CandidateEstimate struct {
	ID         string  `json:"id"`
	EstimateMs float64 `json:"estimate_ms"`
	QueueMs    float64 `json:"queue_ms"`
	BacklogMs  float64 `json:"backlog_ms"`
	// ChargedMs is the prefill this gateway sent the candidate that is not
	// done yet, whole; BacklogMs is the share of it a newcomer is learned
	// to wait behind. Placing a request no candidate holds compares
	// EstimateMs with the whole charge (new prefixes spread by it).
	ChargedMs    float64 `json:"charged_ms"`
	PrefillMs    float64 `json:"prefill_ms"`
	SaturationMs float64 `json:"saturation_ms"`
}

// InventoryRow is one (rule, endpoint, rank) line of the KV-exact
// inventory API.
type InventoryRow struct {
	Rule     string `json:"rule"`
	Endpoint string `json:"endpoint"`
	Rank     int    `json:"rank"`
	Source   string `json:"source"` // zmq, zmq_bind or trtllm_poll
	Blocks   int    `json:"blocks"`
	// Connected: the SUB socket is connected (zmq), or the rank's last
	// event is within --kv-bind-live-window (zmq_bind, which has no
	// per-engine connection).
	Connected bool `json:"connected"`
	Trusted   bool `json:"trusted"`
	// Reason says why the rank is not trusted: disconnected, warmup,
	// health_down (probe down: blocks dropped), ambiguous_topic,
	// seq_gap, restart, reconnect (publisher lost and back: cleared), stale
	// (work sent, no event within --kv-stale-after),
	// or no_events (nothing received yet).
	Reason  string  `json:"untrusted_reason,omitempty"`
	LastSeq *uint64 `json:"last_seq,omitempty"`
	// LastEventAgeSec is the seconds since the endpoint's last batch.
	LastEventAgeSec *float64 `json:"last_event_age_sec,omitempty"`
	// BlockSize is the block size the rule's inventory keys with: learned
	// from the first BlockStored, else kvBlockSize. One that differs from
	// the rule's kvBlockSize is a misconfigured rule (validate warns).
	BlockSize int `json:"block_size,omitempty"`
}
