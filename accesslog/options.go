package accesslog

// Options control the access log. The daemon embeds them in its datapath
// options; the serve flags of the same names bind to them.
type Options struct {
	// Enabled writes one info-level line per data request (the log level
	// must admit info).
	Enabled bool `yaml:"access-log"`
	// SampleRate is the fraction of successful requests (status below 400)
	// that are logged, 0 to 1; failed requests are always logged.
	SampleRate float64 `yaml:"access-log-sample"`
}

// DefaultOptions logs every request.
func DefaultOptions() Options {
	return Options{Enabled: true, SampleRate: 1}
}
