package pick

import (
	"context"
	"time"

	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/kvexact"
)

// Facts are what pickers may know about a request. Pickers that need more
// than the cheap fields (KV-exact tokenises the prompt) derive it from Body
// under Ctx, so the cost is paid only when that picker runs.
type Facts struct {
	Ctx        context.Context // the request's context (cancelled when the client goes)
	Path       string          // "/v1/completions" or "/v1/chat/completions"
	Model      string          // body "model" or X-Model header
	Body       []byte          // the client body, read-only
	SessionKey string          // "" when the request carries none
	PromptKey  []byte          // canonical prompt key (nil when not extracted)
	Tokens     []uint32        // prompt token ids once known (KV-exact tokenised the prompt)
	Now        time.Time

	// Prompt and Messages are the body's "prompt" and "messages" members
	// (raw JSON, nil when absent) when BodyScanned: a caller that already
	// walked the body for the model hands them on (ladder.ScanFacts), so
	// a picker that tokenises does not walk 8 KB of prompt again to find
	// them.
	Prompt, Messages []byte
	BodyScanned      bool

	// KVBlocks and KVHeld are the KV-exact picker's finding, kept for its
	// stale-feed guard (Observe): the request's full blocks and how many
	// each candidate already held. KVHeld is nil when it did not score.
	KVBlocks int
	KVHeld   []kvexact.Score
	// KVPending is set when the KV-exact picker's choice held more of the
	// prompt in blocks this gateway just sent it than in blocks its
	// events have shown (kvexact.Pending).
	KVPending bool

	// PromptTokens and Priced are the cost model's view of the request
	// (Costs.Price): the prompt's length in tokens (0: unknown) and every
	// candidate's estimate, kept so later tiers and the placement reuse
	// them. Placed is set by Costs.Place for the first-token report.
	PromptTokens int
	Priced       []Priced
	Placed       *Placed

	key     uint64 // Key, computed on first use
	keyDone bool
}

// PoolFacts are what a Pool's modes key on, computed once per request.
type PoolFacts struct {
	ClientIP string       // source hash (sel 1), persistence keyed by source IP
	Session  string       // persistence key (sel 3); "" falls back to round-robin
	RingKey  uint64       // CHWBL routing key (chwbl.Ring.Key), sel 8/10
	RingSrc  chwbl.Source // which key RingKey is
	// RingShared is the prompt head a prefix RingKey hashed, in tokens:
	// what every request of the key shares, and its ring home may keep
	// despite the load bound (ringhome.go).
	RingShared int
}

// Clock is the request's time: f.Now, or the wall clock when the caller
// set none (hand-built facts in tests and dry runs).
func (f *Facts) Clock() time.Time {
	if f.Now.IsZero() {
		return time.Now()
	}
	return f.Now
}
