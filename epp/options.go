package epp

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Options configure the EPP server. Build them with DefaultOptions and
// override fields; the daemon embeds this struct rather than re-listing it
// (the yaml names are the daemon's flag names).
type Options struct {
	// Addr is the ext_proc gRPC listen address (GIE convention :9002).
	Addr string `yaml:"epp-addr"`
	// HealthAddr is the gRPC health listen address (GIE convention :9003).
	HealthAddr string `yaml:"epp-health-addr"`
	// MaxBodyBytes caps the request body the EPP buffers to pick; a larger body
	// is refused with 413 before it is all read.
	MaxBodyBytes int64 `yaml:"epp-max-body-bytes"`
	// DestinationNamespace is the dynamic-metadata namespace of the pick and of
	// the served-endpoint report (GIE default envoy.lb).
	DestinationNamespace string `yaml:"epp-destination-namespace"`
	// SubsetNamespace is the filter-metadata namespace of the proxy's subset
	// hint (GIE default envoy.lb.subset_hint).
	SubsetNamespace string `yaml:"epp-subset-namespace"`
	// MaxEndpoints caps the endpoints sent per pick (0: all the picker
	// returns). Stock Envoy routing on the header with an ORIGINAL_DST cluster
	// reads one address, not a list: set 1 there.
	MaxEndpoints int `yaml:"epp-max-endpoints"`
	// RefusalReasonHeader names the response header carrying the reason of a
	// 429/503/413 the EPP answers itself.
	RefusalReasonHeader string `yaml:"epp-refusal-reason-header"`
	// DrainTimeout bounds graceful shutdown: in-flight streams get this long to
	// finish before they are cut.
	DrainTimeout time.Duration `yaml:"epp-drain-timeout"`
	// StreamWorkers is how many long-lived goroutines serve streams (0: a new
	// goroutine per stream). A pick runs deep (the ladder, the tokenizer):
	// on a fresh goroutine its stack is grown and copied on every stream,
	// on a worker once. A stream arriving while every worker is busy gets a
	// goroutine of its own, as with 0.
	StreamWorkers int `yaml:"epp-stream-workers"`
}

// Defaults. The body cap leaves room for agentic prompts (hundreds of KB) and
// long-context requests while bounding what one stream can pin in memory.
const (
	DefaultAddr                 = ":9002"
	DefaultHealthAddr           = ":9003"
	DefaultMaxBodyBytes         = 32 << 20
	DefaultDestinationNamespace = "envoy.lb"
	DefaultSubsetNamespace      = "envoy.lb.subset_hint"
	DefaultRefusalReasonHeader  = "x-infergate-request-dropped-reason"
	DefaultDrainTimeout         = 10 * time.Second
	DefaultStreamWorkers        = 64
)

// DefaultOptions returns the options a GIE-conformant deployment expects.
func DefaultOptions() Options {
	return Options{
		Addr:                 DefaultAddr,
		HealthAddr:           DefaultHealthAddr,
		MaxBodyBytes:         DefaultMaxBodyBytes,
		DestinationNamespace: DefaultDestinationNamespace,
		SubsetNamespace:      DefaultSubsetNamespace,
		RefusalReasonHeader:  DefaultRefusalReasonHeader,
		DrainTimeout:         DefaultDrainTimeout,
		StreamWorkers:        DefaultStreamWorkers,
	}
}

// Validate reports the first option that cannot work, naming its field.
func (o Options) Validate() error {
	switch {
	case o.Addr == "":
		return errors.New("epp: addr: must not be empty")
	case o.HealthAddr == "":
		return errors.New("epp: health_addr: must not be empty")
	case o.Addr == o.HealthAddr:
		return fmt.Errorf("epp: health_addr: %q is also the ext_proc address", o.HealthAddr)
	case o.MaxBodyBytes <= 0:
		return fmt.Errorf("epp: max_body_bytes: %d must be positive", o.MaxBodyBytes)
	case o.DestinationNamespace == "":
		return errors.New("epp: destination_namespace: must not be empty")
	case o.SubsetNamespace == "":
		return errors.New("epp: subset_namespace: must not be empty")
	case o.RefusalReasonHeader == "" || o.RefusalReasonHeader != strings.ToLower(o.RefusalReasonHeader):
		return fmt.Errorf("epp: refusal_reason_header: %q must be a non-empty lower-case header name", o.RefusalReasonHeader)
	case o.MaxEndpoints < 0:
		return fmt.Errorf("epp: max_endpoints: %d must not be negative", o.MaxEndpoints)
	case o.DrainTimeout < 0:
		return fmt.Errorf("epp: drain_timeout: %s must not be negative", o.DrainTimeout)
	case o.StreamWorkers < 0:
		return fmt.Errorf("epp: stream_workers: %d must not be negative", o.StreamWorkers)
	}
	return nil
}
