package accesslog

import "time"

// Options control the access log. The daemon embeds them in its datapath
// options; the serve flags of the same names bind to them.
type Options struct {
	// Enabled writes one info-level line per data request (the log level
	// must admit info).
	Enabled bool `yaml:"access-log"`
	// SampleRate is the fraction of successful requests (status below 400)
	// that are logged, 0 to 1; failed requests are always logged.
	SampleRate float64 `yaml:"access-log-sample"`
	// BufferBytes batches lines into buffers of this size, each written to
	// the log's output in one write (buffer.go); 0 or less writes each
	// line on its own. Memory is bounded at two buffers: when the output
	// stalls, lines that find both full are dropped and counted.
	BufferBytes int `yaml:"access-log-buffer"`
	// FlushEvery is the longest a buffered line waits for its buffer to
	// fill before it is written; 0 or less keeps the default.
	FlushEvery time.Duration `yaml:"access-log-flush"`
}

// DefaultOptions logs every request, batched into 64 KiB writes at least
// once a second.
func DefaultOptions() Options {
	return Options{Enabled: true, SampleRate: 1, BufferBytes: 64 << 10, FlushEvery: time.Second}
}
