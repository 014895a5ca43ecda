package daemon

import (
	"github.com/infergate/infergate/datapath/spec"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
)

// newRuntime builds what serves compiled rules. It is the single place the
// datapath is chosen: swapping noopRuntime for the real datapath is a
// one-line change here. If the returned value also implements
// api.StatusSource it feeds GET …/status; if it implements io.Closer it is
// closed on shutdown.
func newRuntime(opts Options, m *metrics.Metrics, log logrus.FieldLogger) (rules.Runtime, error) {
	_, _ = opts, m
	return noopRuntime{log: log}, nil
}

// noopRuntime accepts every rule and serves none. It lets the control plane
// (API, validation, persistence) run before the datapath exists.
type noopRuntime struct {
	log logrus.FieldLogger
}

func (n noopRuntime) Install(prev, next *spec.Rule) error {
	n.log.WithField("rule", next.Key.String()).Debug("daemon: no-op runtime install")
	return nil
}

func (n noopRuntime) Remove(r *spec.Rule) {
	n.log.WithField("rule", r.Key.String()).Debug("daemon: no-op runtime remove")
}
