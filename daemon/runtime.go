package daemon

import (
	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/sirupsen/logrus"
)

// newRuntime builds what serves compiled rules; it is the single place the
// datapath is chosen. If the returned value also implements
// api.StatusSource it feeds GET …/status; if it has Close(ctx) error (the
// datapath) or Close() error it is closed on shutdown, after the API.
func newRuntime(opts Options, m *metrics.Metrics, keys datapath.KeyAdmitter, log logrus.FieldLogger) (store.Runtime, error) {
	o := opts.Options
	o.Keys = keys
	o.ReplicaConsistent = opts.Store != "" // replicas share rules: make their choices agree
	o.TLS = opts.TLSOptions()
	o.GatewayAddrs = apiAddrPorts(opts) // selfaddr.go
	return datapath.NewWithMetrics(o, m, log), nil
}
