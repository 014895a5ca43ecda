package reqbody

// Options bound the memory request bodies may hold.
type Options struct {
	// MaxInFlightBytes caps the bytes of body buffers held at once by all
	// requests being read or served; 0 or negative means no cap.
	MaxInFlightBytes int64 `yaml:"max-body-bytes-in-flight"`
}

// DefaultMaxInFlightBytes is 1 GiB: 32 full-size (32 MiB) bodies at once,
// or tens of thousands of ordinary prompts.
const DefaultMaxInFlightBytes int64 = 1 << 30

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{MaxInFlightBytes: DefaultMaxInFlightBytes}
}
