package flow

import (
	"strconv"
	"time"
)

// Options bound the queue of one rule and say how requests are classed.
// Build them with DefaultOptions; the yaml names are the serve flags.
type Options struct {
	// QueueLength is how many requests may wait in one rule's queue; one
	// more is shed at once (or takes the place of a lower class). 0: never
	// queue, shed as soon as every endpoint is at its window.
	QueueLength int `yaml:"flow-queue-length"`
	// MaxWait is the longest a request waits in the queue before it is
	// shed (503 with Retry-After). 0: never queue.
	MaxWait time.Duration `yaml:"flow-max-wait"`
	// MinShare is the fraction of dispatches every class below the top is
	// guaranteed while it has requests waiting (0..0.5), so a stream of
	// high-class requests cannot starve the rest.
	MinShare float64 `yaml:"flow-min-share"`
	// MaxDeadline caps a request's x-slo-ttft-ms: a larger value is taken
	// as this bound. Values ≤ 0 or unparsable are ignored (no deadline).
	MaxDeadline time.Duration `yaml:"flow-max-slo-ttft"`
	// UnkeyedCeiling is the highest class a request on a rule without API
	// keys may ask for (canonical name); the header is all the gateway
	// knows of such a client.
	UnkeyedCeiling string `yaml:"flow-unkeyed-max-class"`
	// KeyCeiling is the highest class a request with an API key that
	// grants none (max_priority unset) may ask for.
	KeyCeiling string `yaml:"flow-key-max-class"`
}

// DefaultOptions are the documented defaults: 1024 waiting requests per
// rule, 10 s of wait, 10 % for each lower class, deadlines up to 10 min,
// every class for requests without keys, standard for keys without a
// grant.
func DefaultOptions() Options {
	return Options{
		QueueLength:    1024,
		MaxWait:        10 * time.Second,
		MinShare:       0.1,
		MaxDeadline:    10 * time.Minute,
		UnkeyedCeiling: ClassHigh.String(),
		KeyCeiling:     ClassStandard.String(),
	}
}

// Ceilings resolves the two ceilings; an unknown name resolves to
// DefaultClass (the daemon refuses such options at start through Check).
func (o *Options) Ceilings() (unkeyed, keyed Class) {
	unkeyed, _ = ParseClass(o.UnkeyedCeiling)
	keyed, _ = ParseClass(o.KeyCeiling)
	return unkeyed, keyed
}

// Check reports options that cannot be honoured.
func (o *Options) Check() error {
	for _, v := range [2]struct{ flag, val string }{{"flow-unkeyed-max-class", o.UnkeyedCeiling}, {"flow-key-max-class", o.KeyCeiling}} {
		if _, ok := ParseClass(v.val); !ok {
			return &OptionError{Flag: v.flag, Value: v.val, Why: "is not a class (low, standard, high)"}
		}
	}
	if !(o.MinShare >= 0 && o.MinShare <= 0.5) { // also refuses NaN
		return &OptionError{Flag: "flow-min-share", Value: strconv.FormatFloat(o.MinShare, 'g', -1, 64), Why: "must be within 0..0.5"}
	}
	return nil
}

// OptionError names an option value Check refuses.
type OptionError struct{ Flag, Value, Why string }

func (e *OptionError) Error() string { return "--" + e.Flag + " " + e.Value + " " + e.Why }
