package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// turn is one request of a flow.
type turn struct {
	Prompt    string        // completions prompt ("" for a chat turn)
	User      string        // chat: the user message appended to the history
	MaxTokens int           // output tokens asked for
	Think     time.Duration // pause after the previous turn's answer
}

// flow is what one client does: a single request (shared prefix, trace) or
// a conversation whose turns resend the history (multi-turn).
type flow struct {
	At     time.Duration // start, from the run's start
	Key    int           // group / conversation / trace prefix: the ideal arm pins it
	ConvID string        // X-Conversation-Id ("" sends none)
	System string        // chat: system prompt ("" for completions)
	Turns  []turn
}

func (f *flow) chat() bool { return f.System != "" }

func (f *flow) requests() int { return len(f.Turns) }

// poisson returns arrival offsets of a Poisson process of rate λ over d.
func poisson(rng *rand.Rand, rate float64, d time.Duration) []time.Duration {
	var out []time.Duration
	t := 0.0
	for {
		t += rng.ExpFloat64() / rate
		if t >= d.Seconds() {
			return out
		}
		out = append(out, time.Duration(t*float64(time.Second)))
	}
}

// sharedPrefix is inference-perf's shape: G groups of P prompts; a group's
// prompts share a system prompt of S tokens and add a unique question of Q
// tokens; every request draws one of the G×P prompts. The first G arrivals
// take the groups in a seeded random order, each once, and every later one
// draws its group uniformly: a warm-up of G arrivals has shown every
// system prompt to the fleet, as a fleet in service has seen them, where
// uniform draws leave e^−1.2 ≈ 30 % of the groups unseen after 1.2×G
// arrivals (the short mode's 4 s warm-up at 70 % load) and put their
// first-sight prefills into the measured window (bench.go, measure).
type sharedPrefix struct {
	Groups, Prompts, System, Question, Output int
}

type sharedPrompts struct {
	prompts [][]string // [group][prompt]
}

func (w sharedPrefix) build(g *textGen, seed uint64) sharedPrompts {
	p := sharedPrompts{prompts: make([][]string, w.Groups)}
	for gi := range w.Groups {
		sys := g.text(seeded(seed, uint64(gi)), w.System)
		p.prompts[gi] = make([]string, w.Prompts)
		for pi := range w.Prompts {
			p.prompts[gi][pi] = sys + g.text(seeded(seed+1, uint64(gi*10_000+pi)), w.Question)
		}
	}
	return p
}

// flows draws arrivals and prompts from separate generators, so the flows
// over a shorter d are a prefix of those over a longer one. Arrivals are a
// Poisson process of rate; with firstRate below rate the G first sights
// come first as a Poisson process of firstRate (the same arrivals as a run
// at that rate begins with) and the process of rate starts after the last
// of them, so an overloaded run does not begin with G cold prefills in a
// burst, each group's repeats piling up behind its first prefill.
func (w sharedPrefix) flows(p sharedPrompts, rate, firstRate float64, d time.Duration, seed uint64) []flow {
	rng := seeded(seed, 0x5eed)
	order := rng.Perm(w.Groups)
	var arrivals []time.Duration
	if firstRate >= rate {
		arrivals = poisson(seeded(seed, 0xa441), rate, d)
	} else {
		arrivals = poisson(seeded(seed, 0xa441), firstRate, d)
		if len(arrivals) >= w.Groups {
			arrivals = arrivals[:w.Groups]
			from := arrivals[w.Groups-1]
			for _, at := range poisson(seeded(seed, 0xa442), rate, d-from) {
				arrivals = append(arrivals, from+at)
			}
		}
	}
	out := make([]flow, 0, len(arrivals))
	for i, at := range arrivals {
		gi := 0
		if i < len(order) {
			gi = order[i]
		} else {
			gi = rng.IntN(w.Groups)
		}
		pi := rng.IntN(w.Prompts)
		out = append(out, flow{At: at, Key: gi, Turns: []turn{{Prompt: p.prompts[gi][pi], MaxTokens: w.Output}}})
	}
	return out
}

// coveredAt is the arrival time of the flow that completes the set of keys
// 0…n−1 (every group sent at least once); false if flows never do.
func coveredAt(flows []flow, n int) (time.Duration, bool) {
	seen := make(map[int]bool, n)
	for _, f := range flows {
		if f.Key >= 0 && f.Key < n {
			seen[f.Key] = true
		}
		if len(seen) == n {
			return f.At, true
		}
	}
	return 0, false
}

// startingBefore is the flows that start before end (flows are in time
// order).
func startingBefore(flows []flow, end time.Duration) []flow {
	for i, f := range flows {
		if f.At >= end {
			return flows[:i]
		}
	}
	return flows
}

// multiTurn is C conversations of T turns: a system prompt, then user
// messages; each turn resends the whole history (with the answers the
// engine gave). Conversations start as a Poisson process so that the
// request rate is about the requested rate.
type multiTurn struct {
	Turns, System, User, Output int
	Think                       time.Duration
	ConvID                      bool
}

// settle is roughly how long a conversation lasts on a lightly loaded
// fleet (a turn's prefill and decode, then the pause): until then fewer
// turns are in the air than the steady rate.
func (w multiTurn) settle() time.Duration {
	return time.Duration(w.Turns) * (time.Duration(w.Output)*15*time.Millisecond + 300*time.Millisecond + w.Think)
}

func (w multiTurn) flows(g *textGen, rate float64, d time.Duration, seed uint64, run string) []flow {
	rng := seeded(seed, 0xc0)
	var out []flow
	for c, at := range poisson(rng, rate/float64(w.Turns), d) {
		f := flow{At: at, Key: c, System: g.text(seeded(seed, uint64(c)), w.System)}
		if w.ConvID {
			f.ConvID = fmt.Sprintf("%s-%d", run, c)
		}
		for t := range w.Turns {
			tt := turn{User: g.text(seeded(seed+2, uint64(c*100+t)), w.User), MaxTokens: w.Output}
			if t > 0 {
				tt.Think = time.Duration(rng.ExpFloat64() * float64(w.Think))
			}
			f.Turns = append(f.Turns, tt)
		}
		out = append(out, f)
	}
	return out
}

// traceRecord is one line of a Mooncake-format trace: arrival in ms, prompt
// and output lengths in tokens, and the ids of the prompt's 512-token
// blocks (equal ids = equal content, so shared ids are shared prefixes).
type traceRecord struct {
	Timestamp    int64 `json:"timestamp"`
	InputLength  int   `json:"input_length"`
	OutputLength int   `json:"output_length"`
	HashIDs      []int `json:"hash_ids"`
}

// traceBlock is the Mooncake block size in tokens.
const traceBlock = 512

// traceGen makes a small synthetic Mooncake-style trace: Docs shared
// prefixes (1–MaxDocBlocks blocks) drawn with Zipf popularity, each
// request adding up to MaxUnique unique blocks, a partial last block, and
// short outputs; arrivals are Poisson at 1 request/s (replay compresses
// time to the wanted rate).
type traceGen struct {
	Requests, Docs, MaxDocBlocks, MaxUnique, MinOutput, MaxOutput int
	ZipfS                                                         float64
	NoPrefixShare                                                 float64 // requests with no shared prefix
}

func (t traceGen) generate(seed uint64) []traceRecord {
	rng := seeded(seed, 0x7ace)
	docLen := make([]int, t.Docs)
	for i := range docLen {
		docLen[i] = 1 + rng.IntN(t.MaxDocBlocks)
	}
	zipf := rand.NewZipf(rand.New(rand.NewPCG(seed, 0x21f)), t.ZipfS, 1, uint64(t.Docs-1))
	next := 1_000_000
	ts := 0.0
	out := make([]traceRecord, 0, t.Requests)
	for range t.Requests {
		ts += rng.ExpFloat64() * 1000
		var ids []int
		if rng.Float64() >= t.NoPrefixShare {
			d := int(zipf.Uint64())
			for b := range docLen[d] {
				ids = append(ids, d*100+b)
			}
		}
		for range 1 + rng.IntN(t.MaxUnique) {
			ids = append(ids, next)
			next++
		}
		in := len(ids)*traceBlock - rng.IntN(traceBlock/2)
		out = append(out, traceRecord{Timestamp: int64(ts), InputLength: in,
			OutputLength: t.MinOutput + rng.IntN(t.MaxOutput-t.MinOutput+1), HashIDs: ids})
	}
	return out
}

func writeTrace(w io.Writer, recs []traceRecord) error {
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("write trace: %w", err)
		}
	}
	return nil
}

func readTrace(r io.Reader) ([]traceRecord, error) {
	var out []traceRecord
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rec traceRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", n, err)
		}
		if rec.InputLength <= 0 || len(rec.HashIDs) == 0 || rec.InputLength > len(rec.HashIDs)*traceBlock {
			return nil, fmt.Errorf("trace line %d: input_length %d does not fit %d blocks", n, rec.InputLength, len(rec.HashIDs))
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// traceFlows replays recs compressed to the given mean rate over at most
// d: each hash id becomes 512 tokens of fixed text, the prompt is cut to
// input_length tokens. Key is the first hash id (the prefix a pinned
// engine would own).
func traceFlows(g *textGen, recs []traceRecord, rate float64, d time.Duration, seed uint64, maxOutput int) []flow {
	if len(recs) == 0 {
		return nil
	}
	span := float64(recs[len(recs)-1].Timestamp-recs[0].Timestamp) / 1000
	natural := float64(len(recs)) / math.Max(span, 1e-3)
	scale := natural / rate // replayed seconds per second of trace
	blocks := map[int][]string{}
	block := func(id int) []string {
		if b, ok := blocks[id]; ok {
			return b
		}
		b := strings.Fields(g.text(seeded(seed, uint64(id)), traceBlock))
		blocks[id] = b
		return b
	}
	var out []flow
	for _, r := range recs {
		at := time.Duration(float64(r.Timestamp-recs[0].Timestamp) * scale * float64(time.Millisecond))
		if at >= d {
			break
		}
		words := make([]string, 0, r.InputLength)
		for _, id := range r.HashIDs {
			words = append(words, block(id)...)
		}
		words = words[:r.InputLength]
		prompt := " " + strings.Join(words, " ")
		out = append(out, flow{At: at, Key: r.HashIDs[0], Turns: []turn{{Prompt: prompt, MaxTokens: min(r.OutputLength, maxOutput)}}})
	}
	return out
}
