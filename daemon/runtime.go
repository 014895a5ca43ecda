package daemon

import (
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
)

// newRuntime builds what serves compiled rules. It is the single place the
// datapath is chosen: swapping the no-op runtime for the real datapath is a
// one-line change here. If the returned value also implements
// api.StatusSource it feeds GET …/status; if it has Close(ctx) error (the
// datapath) or Close() error it is closed on shutdown, after the API.
func newRuntime(opts Options, m *metrics.Metrics, log logrus.FieldLogger) (rules.Runtime, error) {
	_, _, _ = opts, m, log
	return noopRuntime{}, nil
}

// noopRuntime accepts every rule and serves none, so the control plane (API,
// validation, persistence) runs before the datapath is wired in.
type noopRuntime = rules.NopRuntime
