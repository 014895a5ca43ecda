package enginesim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/infergate/infergate/internal/kvfake"
	"github.com/infergate/infergate/kvexact/bpe"
)

// Config is one engine process-equivalent: its model and where it serves.
type Config struct {
	Options
	// Addr is the HTTP listen address (ip:port; port 0 picks one).
	Addr string
	// ZMQAddr binds the KV-event PUB socket (vLLM --kv-events-config
	// endpoint), e.g. tcp://127.0.0.101:5557; "" publishes nothing.
	ZMQAddr string
	// Tokenizer and Template tokenise prompts and chats, as the engine's
	// own tokenizer would (the gateway's in-process tokenizer must agree).
	Tokenizer *bpe.Tokenizer
	Template  bpe.Template
	// EngineID and NixlPort are advertised in a prefill's
	// kv_transfer_params.
	EngineID string
	NixlPort int
	// MaxModelLen is reported by /tokenize.
	MaxModelLen int
}

// Engine serves one simulated engine over HTTP until Close.
type Engine struct {
	cfg   Config
	mu    sync.Mutex // guards core and the publisher's batch order
	core  *Core
	epoch time.Time
	wake  chan struct{}
	pub   *kvfake.Publisher
	reg   *prometheus.Registry
	ttft  prometheus.Histogram
	srv   *http.Server
	ln    net.Listener
	stop  context.CancelFunc
	done  chan struct{}
	ids   atomic.Uint64
}

// Start binds the engine's sockets and starts its step loop.
func Start(cfg Config) (*Engine, error) {
	if cfg.Tokenizer == nil {
		return nil, errors.New("enginesim: a tokenizer is required")
	}
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = 32768
	}
	core, err := NewCore(cfg.Options)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, core: core, epoch: time.Now(), wake: make(chan struct{}, 1), done: make(chan struct{})}
	if e.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, fmt.Errorf("enginesim: listen %s: %w", cfg.Addr, err)
	}
	if cfg.ZMQAddr != "" {
		o := kvfake.DefaultOptions()
		o.PubAddr = cfg.ZMQAddr
		o.ReplayBuffer = 1 // no replay socket; keep the buffer tiny
		if e.pub, err = kvfake.Start(o); err != nil {
			_ = e.ln.Close()
			return nil, fmt.Errorf("enginesim: KV publisher: %w", err)
		}
	}
	e.registerMetrics()
	e.srv = &http.Server{Handler: e.routes(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := context.WithCancel(context.Background())
	e.stop = stop
	go func() { _ = e.srv.Serve(e.ln) }()
	go e.loop(ctx)
	return e, nil
}

// Addr is the HTTP address the engine serves on.
func (e *Engine) Addr() string { return e.ln.Addr().String() }

// KVEndpoint is the bound PUB endpoint ("" without events).
func (e *Engine) KVEndpoint() string {
	if e.pub == nil {
		return ""
	}
	return e.pub.Endpoint()
}

// Close stops serving; requests in flight are cut.
func (e *Engine) Close() error {
	e.stop()
	<-e.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := e.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = e.srv.Close()
	}
	if e.pub != nil {
		err = errors.Join(err, e.pub.Close())
	}
	return err
}

func (e *Engine) now() time.Duration { return time.Since(e.epoch) }

// loop is the engine's step loop: plan, sleep the step's modelled time,
// complete. It is the only writer of the event stream.
func (e *Engine) loop(ctx context.Context) {
	defer close(e.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e.mu.Lock()
		dur, busy := e.core.Plan(e.now())
		e.publishLocked()
		e.mu.Unlock()
		if !busy {
			select {
			case <-e.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		timer.Reset(dur)
		select {
		case <-timer.C:
		case <-ctx.Done():
			return
		}
		e.mu.Lock()
		e.core.Complete(e.now())
		for _, d := range e.core.DrainTTFT() {
			e.ttft.Observe(d.Seconds())
		}
		e.publishLocked()
		e.mu.Unlock()
	}
}

// publishLocked sends the step's KV events as one batch, as vLLM does.
func (e *Engine) publishLocked() {
	ev := e.core.DrainEvents()
	if len(ev) == 0 || e.pub == nil {
		return
	}
	ts := float64(time.Now().UnixNano()) / 1e9
	_, _ = e.pub.Publish(kvfake.Batch{TS: ts, Events: ev})
}

// submit queues a request and wakes the loop.
func (e *Engine) submit(r Request) *Seq {
	e.mu.Lock()
	s := e.core.Add(r, e.now())
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return s
}

func (e *Engine) cancel(s *Seq) {
	e.mu.Lock()
	e.core.Cancel(s)
	e.mu.Unlock()
}

// Stats returns the engine's counters and gauges.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.core.Stats()
}

// ResetPrefixCache empties the prefix cache (publishing AllBlocksCleared);
// false while requests hold blocks.
func (e *Engine) ResetPrefixCache() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ok := e.core.ResetPrefixCache()
	e.publishLocked()
	return ok
}

// vLLM's metric names (vllm/v1/metrics/loggers.py).
const (
	metricRunning       = "vllm:num_requests_running"
	metricWaiting       = "vllm:num_requests_waiting"
	metricKVUsage       = "vllm:kv_cache_usage_perc"
	metricPrefixQueries = "vllm:prefix_cache_queries_total"
	metricPrefixHits    = "vllm:prefix_cache_hits_total"
	metricTTFT          = "vllm:time_to_first_token_seconds"
	metricPromptTokens  = "vllm:prompt_tokens_total"
	metricGenTokens     = "vllm:generation_tokens_total"
	metricSuccess       = "vllm:request_success_total"
	// The simulator's own counters (no vLLM equivalent): where prompt
	// tokens came from on this engine.
	metricComputed    = "enginesim_prompt_tokens_computed_total"
	metricTransferred = "enginesim_prompt_tokens_transferred_total"
	labelModelName    = "model_name"
	labelEngine       = "engine"
)

// vLLM's TTFT histogram buckets.
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}

func (e *Engine) registerMetrics() {
	e.reg = prometheus.NewRegistry()
	labels := prometheus.Labels{labelModelName: e.cfg.Model, labelEngine: "0"}
	gauge := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return f(e.Stats()) })
	}
	counter := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return f(e.Stats()) })
	}
	e.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricTTFT, Help: "Histogram of time to first token in seconds.", ConstLabels: labels, Buckets: ttftBuckets})
	e.reg.MustRegister(
		gauge(metricRunning, "Number of requests in model execution batches.", func(s Stats) float64 { return float64(s.Running) }),
		gauge(metricWaiting, "Number of requests waiting to be processed.", func(s Stats) float64 { return float64(s.Waiting) }),
		gauge(metricKVUsage, "KV-cache usage. 1 means 100 percent usage.", func(s Stats) float64 { return s.KVUsage }),
		counter(metricPrefixQueries, "Prefix cache queries, in terms of number of queried tokens.", func(s Stats) float64 { return float64(s.PrefixQueries) }),
		counter(metricPrefixHits, "Prefix cache hits, in terms of number of cached tokens.", func(s Stats) float64 { return float64(s.PrefixHits) }),
		counter(metricPromptTokens, "Number of prefill tokens processed.", func(s Stats) float64 { return float64(s.PromptTokens) }),
		counter(metricGenTokens, "Number of generation tokens processed.", func(s Stats) float64 { return float64(s.GenerationTokens) }),
		counter(metricComputed, "Prompt tokens prefilled on this engine.", func(s Stats) float64 { return float64(s.ComputedTokens) }),
		counter(metricTransferred, "Prompt tokens pulled from a prefill engine (NIXL).", func(s Stats) float64 { return float64(s.TransferredTokens) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: metricSuccess, Help: "Count of successfully processed requests.",
			ConstLabels: prometheus.Labels{labelModelName: e.cfg.Model, labelEngine: "0", "finished_reason": "length"}},
			func() float64 { return float64(e.Stats().Finished) }),
		e.ttft,
	)
}

func (e *Engine) metricsHandler() http.Handler {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{})
}
