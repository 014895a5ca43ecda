package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/bpe"
	"github.com/infergate/infergate/test/enginesim"
)

// Wire names the client writes and reads.
const (
	pathCompletions     = "/v1/completions"
	pathChatCompletions = "/v1/chat/completions"
	headerConversation  = "X-Conversation-Id"
	sseData             = "data: "
	sseDone             = "[DONE]"
)

// target is where an arm's requests go: a VIP, or (ideal) straight to the
// engine a flow is pinned to.
type target struct {
	Arm     string
	VIP     string   // http://ip:port
	Engines []string // ideal: http://ip:port per engine; flow.Key mod n
}

func (t target) url(f *flow, path string) string {
	if len(t.Engines) > 0 {
		k := f.Key % len(t.Engines)
		if k < 0 {
			k += len(t.Engines)
		}
		return t.Engines[k] + path
	}
	return t.VIP + path
}

// result is one request as the client saw it.
type result struct {
	Flow, Turn int
	Key        int
	Start      float64 // seconds from the run's start
	Status     int
	Err        string  `json:",omitempty"`
	TTFT       float64 // seconds; -1 without a first token
	E2E        float64
	Tokens     int
	ITLMean    float64
	Prompt     int    // prompt tokens (engine's usage)
	Cached     int    // cached prompt tokens (engine's usage)
	IdealHit   int    // tokens an ample pinned cache would have held (computed)
	IdealOf    int    // prompt tokens as the replayer tokenised them
	Engine     string `json:",omitempty"` // the engine that answered, if it says (enginesim does)
	itl        []float64
}

func (r *result) ok() bool { return r.Status == http.StatusOK && r.Err == "" && r.Tokens > 0 }

// firstSight: the computed ideal cache held nothing of r's prompt (no
// earlier request shared a block), so every router computes all of it.
// Without a computed ideal (IdealOf 0) nothing is a first sight.
func (r *result) firstSight() bool { return r.IdealHit == 0 && r.IdealOf > 0 }

// lostAffinity: r found at least one block (16 tokens) less cached than
// the computed ideal holds.
func (r *result) lostAffinity() bool { return r.Cached+16 <= r.IdealHit }

// idealCache is the computed upper bound: one unbounded prefix cache (as if
// every group were pinned to an engine with ample room), matched block by
// block like vLLM (the last prompt token is always computed).
type idealCache struct {
	mu     sync.Mutex
	tok    *bpe.Tokenizer
	tmpl   bpe.Template
	blocks map[uint64]struct{}
}

func (c *idealCache) observe(f *flow, history []bpe.Message, prompt string) (hit, of int) {
	if c == nil {
		return 0, 0
	}
	var ids []uint32
	if f.chat() {
		text, err := c.tmpl.Render(history, true)
		if err != nil {
			return 0, 0
		}
		ids = c.tok.Encode(text, false)
	} else {
		ids = c.tok.Encode(prompt, true)
	}
	keys := kvexact.KeysForTokens(ids, 16)
	maxHit := 0
	if len(ids) > 0 {
		maxHit = min((len(ids)-1)/16, len(keys))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for hit < maxHit {
		if _, ok := c.blocks[keys[hit]]; !ok {
			break
		}
		hit++
	}
	for _, k := range keys {
		c.blocks[k] = struct{}{}
	}
	return hit * 16, len(ids)
}

// runner sends flows and records results.
type runner struct {
	client *http.Client
	model  string
	ideal  *idealCache
	// cut, when set, stops the run as soon as nothing measured can change
	// any more (cutRule); prog is the run's progress it reads.
	cut  cutRule
	prog *progress
}

func newHTTPClient() *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        2048,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr}
}

// run plays flows against t until they finish or ctx ends (requests still
// running are then cut and recorded with an error).
func (rn *runner) run(ctx context.Context, t target, flows []flow) []*result {
	var mu sync.Mutex
	var out []*result
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	if rn.cut.Until > 0 {
		rn.prog = &progress{}
		stop := make(chan struct{})
		defer close(stop)
		go rn.prog.watch(stop, start, rn.cut, cancel)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := range flows {
		f := &flows[i]
		if d := time.Until(start.Add(f.At)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(fi int) {
			defer wg.Done()
			res := rn.flow(ctx, t, f, fi, start)
			mu.Lock()
			out = append(out, res...)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

func (rn *runner) flow(ctx context.Context, t target, f *flow, fi int, start time.Time) []*result {
	var out []*result
	var history []bpe.Message
	if f.chat() {
		history = append(history, bpe.Message{Role: bpe.RoleSystem, Content: f.System})
	}
	for ti, tu := range f.Turns {
		if tu.Think > 0 {
			select {
			case <-time.After(tu.Think):
			case <-ctx.Done():
				return out
			}
		}
		if ctx.Err() != nil {
			return out
		}
		body := map[string]any{"model": rn.model, "max_tokens": tu.MaxTokens, "stream": true,
			"stream_options": map[string]any{"include_usage": true}}
		path := pathCompletions
		if f.chat() {
			history = append(history, bpe.Message{Role: bpe.RoleUser, Content: tu.User})
			body["messages"] = history
			path = pathChatCompletions
		} else {
			body["prompt"] = tu.Prompt
		}
		r := &result{Flow: fi, Turn: ti, Key: f.Key}
		r.IdealHit, r.IdealOf = rn.ideal.observe(f, history, tu.Prompt)
		text := rn.send(ctx, t.url(f, path), f, body, r, start)
		out = append(out, r)
		if !r.ok() {
			return out
		}
		if f.chat() {
			history = append(history, bpe.Message{Role: bpe.RoleAssistant, Content: text})
		}
	}
	return out
}

type sseChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens int `json:"prompt_tokens"`
		Details      *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// send posts one streamed request and measures it; it returns the answer.
func (rn *runner) send(ctx context.Context, url string, f *flow, body map[string]any, r *result, start time.Time) string {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		r.Err = err.Error()
		return ""
	}
	req.Header.Set("Content-Type", "application/json")
	if f.ConvID != "" {
		req.Header.Set(headerConversation, f.ConvID)
	}
	t0 := time.Now()
	r.Start = t0.Sub(start).Seconds()
	r.TTFT = -1
	pi := rn.prog.begin(r.Start)
	defer func() {
		r.E2E = time.Since(t0).Seconds()
		rn.prog.end(pi, r.Start+r.E2E)
	}()
	resp, err := rn.client.Do(req)
	if err != nil {
		r.Err = err.Error()
		return ""
	}
	defer resp.Body.Close()
	r.Status, r.Engine = resp.StatusCode, resp.Header.Get(enginesim.HeaderEngine)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		r.Err = fmt.Sprintf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		return ""
	}
	var answer strings.Builder
	br := bufio.NewReaderSize(resp.Body, 4096)
	last := t0
	var c sseChunk
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err != io.EOF || r.Tokens == 0 {
				r.Err = "stream: " + err.Error()
			}
			break
		}
		data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte(sseData))
		if !ok {
			continue
		}
		if string(data) == sseDone {
			break
		}
		c = sseChunk{}
		if err := json.Unmarshal(data, &c); err != nil {
			r.Err = "chunk: " + err.Error()
			break
		}
		if c.Usage != nil {
			r.Prompt = c.Usage.PromptTokens
			if c.Usage.Details != nil {
				r.Cached = c.Usage.Details.CachedTokens
			}
		}
		for _, ch := range c.Choices {
			piece := ch.Text + ch.Delta.Content
			if piece == "" {
				continue
			}
			now := time.Now()
			if r.Tokens == 0 {
				r.TTFT = now.Sub(t0).Seconds()
				rn.prog.first(pi, r.TTFT)
			} else {
				r.itl = append(r.itl, now.Sub(last).Seconds())
			}
			last = now
			r.Tokens++
			answer.WriteString(piece)
		}
	}
	if n := len(r.itl); n > 0 {
		s := 0.0
		for _, v := range r.itl {
			s += v
		}
		r.ITLMean = s / float64(n)
	}
	return answer.String()
}
