package tenant

import "sync/atomic"

// Usage counts one key's traffic since the daemon started.
type Usage struct {
	requests, rejected        atomic.Int64
	promptTokens, complTokens atomic.Int64
	estimated                 atomic.Int64 // settled requests that had no engine usage
}

// UsageView is GET …/apikey/<id>/usage.
type UsageView struct {
	KeyID            string `json:"key_id"`
	TenantID         string `json:"tenant_id"`
	Requests         int64  `json:"requests"`
	Rejected         int64  `json:"rejected"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	TotalTokens      int64  `json:"total_tokens"`
	// EstimatedRequests were settled on the reservation because the engine
	// reported no usage (a stream cut short, an engine without usage).
	EstimatedRequests int64 `json:"estimated_requests"`
}

func (u *Usage) view(id, tenantID string) UsageView {
	p, c := u.promptTokens.Load(), u.complTokens.Load()
	return UsageView{KeyID: id, TenantID: tenantID, Requests: u.requests.Load(), Rejected: u.rejected.Load(),
		PromptTokens: p, CompletionTokens: c, TotalTokens: p + c, EstimatedRequests: u.estimated.Load()}
}
