package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Engines someone else runs (--engines-at) differ from enginesim in ways
// the bench must not paper over:
//
//   - Their tokenizer is their own. The gateway is started without
//     --kv-tokenizer and asks the engines' /tokenize, unless
//     --gateway-tokenizer names the engines' tokenizer: token ids from
//     another tokenizer key blocks no engine ever publishes.
//   - They may publish KV events by dialling a subscriber (llm-d's
//     inference simulator always does; vLLM does for an endpoint without a
//     wildcard host). --kv-bind-addr starts the gateway with its one bound
//     SUB socket there. That topology has no connection per engine: a
//     rank counts as subscribed once it has published, so the bench primes
//     every engine with one direct request and waits for its blocks.
//   - They may lack vLLM's dev endpoint POST /reset_prefix_cache. vLLM's
//     sleep mode (POST /sleep, GET /is_sleeping, POST /wake_up) discards
//     the prefix cache too and publishes AllBlocksCleared, so the bench
//     resets through it when the engine really went to sleep.
type foreignConfig struct {
	bindAddr  string
	tokenizer string
	extra     stringList // more serve flags, e.g. a tokenize budget for slow engines
}

func (c *foreignConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.bindAddr, "kv-bind-addr", "", "start the gateway with --kv-bind-addr ADDR (e.g. tcp://127.0.0.1:5557): engines dial in and publish with topic kv@<ip:port>@<model>; empty: the gateway dials every engine's --zmq-port")
	fs.Var(&c.extra, "gateway-arg", "one more serve flag for the gateway (repeatable), e.g. --gateway-arg=--kv-tokenize-timeout=500ms for engines whose /tokenize answers slower than the default budget")
	fs.StringVar(&c.tokenizer, "gateway-tokenizer", "", "with --engines-at: the engines' own tokenizer directory for the gateway's in-process tokenisation (empty: the gateway asks the engines' /tokenize)")
}

// gatewayTokenizer is the gateway's --kv-tokenizer: the simulated fleet's
// own tokenizer, or for engines someone else runs only the one named
// ("" starts the gateway without it).
func (c *config) gatewayTokenizer() string {
	if c.enginesAt == "" {
		return c.tokenizer
	}
	return c.foreign.tokenizer
}

// gatewayArgs are the serve flags the fleet's KV-event topology needs, then
// those given with --gateway-arg.
func (c *config) gatewayArgs() []string {
	var args []string
	if c.foreign.bindAddr != "" {
		args = append(args, "--kv-bind-addr", c.foreign.bindAddr)
	}
	return append(args, c.foreign.extra...)
}

// primeWords is a prompt long enough for several 16-token blocks under any
// word-level or BPE tokenizer, so that every engine publishes a BlockStored.
const primeWords = 96

// primeEngines waits until the gateway indexes blocks of every engine
// (loxilb_pd_kv_blocks > 0: the bind topology's "subscribed"), sending
// one prompt straight to each engine not seen yet, again every
// primeEvery: a publisher that dials drops what it publishes before its
// connection is up (and retries its dial only once a second). Each prompt
// is new, so no block is a hit that publishes nothing.
func (b *bench) primeEngines(ctx context.Context, g *gateway, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var seen map[string]bool
	for attempt := 0; ; attempt++ {
		for i, e := range b.engines {
			if !seen[strings.TrimPrefix(e, "http://")] {
				if err := b.prime(ctx, e, fmt.Sprintf("prime%d try%d", i, attempt)); err != nil {
					return err
				}
			}
		}
		for wait := time.Now().Add(primeEvery); time.Now().Before(wait); time.Sleep(250 * time.Millisecond) {
			m, err := scrape(ctx, b.scrapeC, g.api+"/metrics", func(n string) bool { return n == "loxilb_pd_kv_blocks" })
			if err != nil {
				continue
			}
			if seen = publishingEndpoints(m); len(seen) >= len(b.engines) {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("KV events of %d of %d engines reached the gateway's bound socket (is each engine's publisher pointed at --kv-bind-addr, with its own ip:port in the topic?)", len(seen), len(b.engines))
		}
	}
}

// primeEvery is how long a prime waits for its blocks before it is sent
// again: a second for the publisher's batch flush, a second for its dial.
const primeEvery = 2500 * time.Millisecond

// prime sends one prompt of primeWords words, all tagged, straight to e.
func (b *bench) prime(ctx context.Context, e, tag string) error {
	words := make([]string, primeWords)
	for j := range words {
		words[j] = fmt.Sprintf("%s word%d", tag, j)
	}
	body, _ := json.Marshal(map[string]any{"model": b.cfg.model, "prompt": strings.Join(words, " "), "max_tokens": 1})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e+pathCompletions, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return fmt.Errorf("prime %s: %w", e, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("prime %s: status %d", e, resp.StatusCode)
	}
	return nil
}

// publishingEndpoints is the set of endpoint labels of the
// loxilb_pd_kv_blocks series holding blocks.
func publishingEndpoints(m series) map[string]bool {
	seen := map[string]bool{}
	for k, v := range m {
		if v <= 0 {
			continue
		}
		if _, rest, ok := strings.Cut(k, `endpoint="`); ok {
			if ep, _, ok := strings.Cut(rest, `"`); ok {
				seen[ep] = true
			}
		}
	}
	return seen
}

// errNoSleep: the engine answered /sleep but is not asleep (vLLM and the
// llm-d simulator need their dev mode and sleep mode for it).
var errNoSleep = errors.New("engine does not sleep")

// sleepReset empties e's prefix cache through vLLM's sleep mode.
func (b *bench) sleepReset(ctx context.Context, e string) error {
	post := func(path string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e+path, nil)
		resp, err := b.scrapeC.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: status %d", path, resp.StatusCode)
		}
		return nil
	}
	if err := post("/sleep?level=1"); err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e+"/is_sleeping", nil)
	resp, err := b.scrapeC.Do(req)
	if err != nil {
		return err
	}
	var st struct {
		IsSleeping bool `json:"is_sleeping"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || !st.IsSleeping {
		return errNoSleep
	}
	return post("/wake_up")
}

// sleepResetFlush is how long a slept engine's AllBlocksCleared may take to
// reach the gateway: llm-d's simulator flushes its event batch once a
// second when it is not full.
const sleepResetFlush = 1200 * time.Millisecond
