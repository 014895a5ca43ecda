package pdfake

import (
	"encoding/json"
	"net/http"

	"github.com/infergate/infergate/kvexact"
)

// TensorRT-LLM event envelope names (as the trtpoll package reads them).
const (
	trtEventID    = "event_id"
	trtWindowSize = "window_size"
	trtData       = "data"
	trtType       = "type"
	trtStored     = "stored"
	trtCreated    = "created"
	trtWindow     = 32768

	trtNumBlocks    = "num_blocks_per_cache_level"
	trtParentHash   = "parent_hash"
	trtBlocks       = "blocks"
	trtStoredBlock  = "stored_block"
	trtBlockHash    = "block_hash"
	trtTokens       = "tokens"
	trtUniqueToken  = "unique_token"
	trtTokenID      = "token_id"
	trtTokenExtraID = "token_extra_id"
	trtCacheSalt    = "cache_salt"
	trtCacheLevel   = "cache_level"
	trtPriority     = "priority"
	trtMMKeys       = "mm_keys"
)

// startTRTEvents makes a TensorRT-LLM fake keep an event ring drained by
// POST /kv_cache_events (destructive, like trtllm-serve with
// event_buffer_max_size > 0). The first event after start or restart is
// "created", emitted at the first KV allocation as the engine does.
func (e *Engine) startTRTEvents(mux *http.ServeMux) {
	if e.cfg.KV.BlockSize <= 0 {
		e.cfg.KV.BlockSize = kvexact.DefaultBlockSize
	}
	e.kv = &kvState{cfg: e.cfg.KV, stored: map[uint64]bool{}, trt: true}
	mux.HandleFunc("POST /kv_cache_events", e.serveKVCacheEvents)
	mux.HandleFunc("POST /admin/kv/restart", e.serveKVRestart)
	mux.HandleFunc("POST /admin/kv/stop", e.serveKVPause(true))
	mux.HandleFunc("POST /admin/kv/start", e.serveKVPause(false))
}

// trtAppendLocked buffers one event with the next event_id.
func (s *kvState) trtAppendLocked(data map[string]any) {
	if !s.trtCreated {
		s.trtCreated = true
		s.trtAppendRaw(map[string]any{trtType: trtCreated, trtNumBlocks: []int{13391, 0}})
	}
	s.trtAppendRaw(data)
}

func (s *kvState) trtAppendRaw(data map[string]any) {
	s.trtEvents = append(s.trtEvents, map[string]any{trtEventID: s.trtNext, trtWindowSize: trtWindow, trtData: data})
	s.trtNext++
}

// trtStoredLocked buffers a "stored" event for blocks chained to parent.
func (s *kvState) trtStoredLocked(hashes []uint64, tokens []uint32, parent *uint64) {
	bs := s.cfg.BlockSize
	blocks := make([]map[string]any, len(hashes))
	for i, h := range hashes {
		toks := make([]map[string]any, bs)
		for j := range toks {
			toks[j] = map[string]any{trtType: trtUniqueToken, trtTokenID: tokens[i*bs+j], trtTokenExtraID: 0}
		}
		blocks[i] = map[string]any{trtType: trtStoredBlock, trtBlockHash: h, trtTokens: toks,
			trtCacheSalt: nil, trtCacheLevel: 0, trtPriority: 35, trtMMKeys: []any{}}
	}
	var p any
	if parent != nil {
		p = *parent
	}
	s.trtAppendLocked(map[string]any{trtType: trtStored, trtParentHash: p, trtBlocks: blocks})
}

// serveKVCacheEvents drains the buffer.
func (e *Engine) serveKVCacheEvents(w http.ResponseWriter, _ *http.Request) {
	s := e.kv
	s.mu.Lock()
	out := s.trtEvents
	s.trtEvents = nil
	s.mu.Unlock()
	if out == nil {
		out = []map[string]any{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
