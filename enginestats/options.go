package enginestats

import (
	"math"
	"time"
)

// Defaults of Options.
const (
	// DefaultInterval is the pause between two scrapes of one endpoint:
	// short enough that a queue built in a second is seen. Its cost: 64
	// endpoints took 0.8–1.1 % of one core of a loaded 2-core host
	// (TestScrapeCost, ENGINESTATS_COST=1; docs/performance.md).
	DefaultInterval = 250 * time.Millisecond
	// DefaultTimeout bounds one scrape (connect to last byte); a port that
	// hangs costs one goroutine waiting, never a request.
	DefaultTimeout = 500 * time.Millisecond
	// DefaultJitter varies every pause between bursts (fraction of
	// Interval), so scrapes do not beat with an engine's periodic work.
	DefaultJitter = 0.1
	// DefaultMaxBytes caps a body: vLLM's full exposition with its
	// histograms is tens of KiB.
	DefaultMaxBytes = 2 << 20
	// DefaultStaleAfter: a signal older than this is ignored (four missed
	// scrapes at the default interval).
	DefaultStaleAfter = time.Second
	// DefaultModelsRefresh is the pause between two reads of an endpoint's
	// /v1/models for its context window: a window changes only when the
	// engine restarts with another --max-model-len.
	DefaultModelsRefresh = 5 * time.Minute
	// DefaultWindowShare: a lone gateway takes the whole of an engine's
	// batch limit as its admission window.
	DefaultWindowShare = 1.0
)

// Options tune engine scraping. The daemon embeds them in datapath.Options;
// the yaml names are the serve flags'.
type Options struct {
	// Interval between scrapes of one endpoint; negative turns scraping
	// off (no signal anywhere: routing as without engine metrics).
	Interval time.Duration `yaml:"engine-scrape-interval"`
	// Timeout bounds one scrape.
	Timeout time.Duration `yaml:"engine-scrape-timeout"`
	// Jitter is the fraction of Interval each pause between bursts
	// varies by, at random.
	Jitter float64 `yaml:"engine-scrape-jitter"`
	// MaxBytes caps one exposition body; a larger one is refused (too_large).
	MaxBytes int64 `yaml:"engine-scrape-max-bytes"`
	// StaleAfter is how long after its last good scrape a signal is still
	// trusted.
	StaleAfter time.Duration `yaml:"engine-signal-stale-after"`
	// ModelsRefresh is the pause between two reads of an endpoint's
	// /v1/models for its max_model_len (models.go), on P/D rules that
	// tokenise prompts and do not configure the window; negative turns
	// the reads off.
	ModelsRefresh time.Duration `yaml:"engine-models-refresh"`
	// LearnWindows sizes the admission window of every endpoint that has
	// none configured (no admission_window on the rule or the endpoint;
	// never a P/D prefill) from the engine's own batch limit
	// (batchlimit.go), read with the context windows every ModelsRefresh.
	// Off: only configured windows exist, as before.
	LearnWindows bool `yaml:"engine-learn-windows"`
	// WindowShare is the fraction of a learned batch limit this gateway
	// takes as its window (0 < share <= 1, rounded up, at least 1): with
	// R gateway replicas in front of the same engines, 1/R keeps their sum
	// near the engine's limit.
	WindowShare float64 `yaml:"engine-window-share"`
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{
		Interval:   DefaultInterval,
		Timeout:    DefaultTimeout,
		Jitter:     DefaultJitter,
		MaxBytes:   DefaultMaxBytes,
		StaleAfter: DefaultStaleAfter,

		ModelsRefresh: DefaultModelsRefresh,
		WindowShare:   DefaultWindowShare,
	}
}

// withDefaults fills zero fields (a 0 from a flag keeps the default).
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Interval == 0 {
		o.Interval = d.Interval
	}
	if o.Timeout <= 0 {
		o.Timeout = d.Timeout
	}
	if o.Jitter < 0 || o.Jitter > 0.5 {
		o.Jitter = d.Jitter
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = d.MaxBytes
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = d.StaleAfter
	}
	if o.ModelsRefresh == 0 {
		o.ModelsRefresh = d.ModelsRefresh
	}
	if !(o.WindowShare > 0 && o.WindowShare <= 1) {
		o.WindowShare = d.WindowShare
	}
	return o
}

// LearnsWindows reports whether admission windows are learned from the
// engines (LearnWindows, and the reads are not turned off).
func (o Options) LearnsWindows() bool {
	_, on := o.ModelsEvery()
	return o.LearnWindows && on
}

// ShareOf is this gateway's window for an engine whose batch limit is n:
// n × WindowShare rounded up, at least 1 (0 for n <= 0: nothing learned).
func (o Options) ShareOf(n int) int {
	if n <= 0 {
		return 0
	}
	o = o.withDefaults()
	return max(1, int(math.Ceil(float64(n)*o.WindowShare-1e-9)))
}

// ModelsEvery is the pause between two /v1/models reads of an endpoint;
// on is false when the reads are turned off.
func (o Options) ModelsEvery() (every time.Duration, on bool) {
	o = o.withDefaults()
	return o.ModelsRefresh, o.ModelsRefresh > 0
}

// Off reports whether scraping is turned off.
func (o Options) Off() bool { return o.Interval < 0 }
