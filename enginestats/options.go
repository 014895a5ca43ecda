package enginestats

import "time"

// Defaults of Options.
const (
	// DefaultInterval is the pause between two scrapes of one endpoint:
	// short enough that a queue built in a second is seen. Its cost: 64
	// endpoints took 1.0–1.3 % of one core of a loaded 2-core host
	// (TestScrapeCost, ENGINESTATS_COST=1).
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
	return o
}

// ModelsEvery is the pause between two /v1/models reads of an endpoint;
// on is false when the reads are turned off.
func (o Options) ModelsEvery() (every time.Duration, on bool) {
	o = o.withDefaults()
	return o.ModelsRefresh, o.ModelsRefresh > 0
}

// Off reports whether scraping is turned off.
func (o Options) Off() bool { return o.Interval < 0 }
