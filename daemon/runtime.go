package daemon

import (
	"time"

	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
)

// newRuntime builds what serves compiled rules; it is the single place the
// datapath is chosen. If the returned value also implements
// api.StatusSource it feeds GET …/status; if it has Close(ctx) error (the
// datapath) or Close() error it is closed on shutdown, after the API.
func newRuntime(opts Options, m *metrics.Metrics, keys datapath.KeyAdmitter, log logrus.FieldLogger) (rules.Runtime, error) {
	o := datapath.DefaultOptions()
	o.Keys = keys
	o.SSEModeEnforcesKeys = opts.SSEModeEnforcesKeys
	o.BindAnyVIP = opts.BindAnyVIP
	o.Breaker5xxStreak = opts.Breaker5xxStreak // 0 disables
	setIf(&o.MaxBodyBytes, opts.MaxBodyBytes)  // zero values keep the datapath default
	setIf(&o.BreakerConnectFailures, opts.BreakerConnectFailures)
	setIf(&o.BreakerPDConnectFailures, opts.BreakerPDConnectFailures)
	setIf(&o.BreakerOpenFor, opts.BreakerOpenFor)
	setIf(&o.DrainGrace, opts.DrainGrace)
	setIf(&o.PrefillTimeout, opts.PrefillTimeout)
	setIf(&o.DecodeFirstByteTimeout, opts.DecodeFirstByteTimeout)
	setIf(&o.MaxStreamedBodyBytes, opts.MaxStreamedBodyBytes) // issue 14
	setIf(&o.StreamedBodyTimeout, opts.StreamedBodyTimeout)
	setIf(&o.FirstByteTimeout, opts.FirstByteTimeout)
	setIf(&o.BodyStallTimeout, opts.BodyStallTimeout)
	setIf(&o.StreamIdleTimeout, opts.StreamIdleTimeout)
	o.PrefixIndex = opts.PrefixIndexOptions()
	o.KV = opts.KVPlaneOptions()
	o.Admission = opts.Edge // issue 10: taken as given (0 = no cap)
	o.Bodies = opts.Bodies
	o.AllowUnspecifiedVIP = opts.AllowUnspecifiedVIP
	o.ReplicaConsistent = opts.Store != "" // replicas share rules: make their choices agree
	o.TLS = opts.TLSOptions()              // issue 11
	return datapath.NewWithMetrics(o, m, log), nil
}

func setIf[T int | int64 | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}
