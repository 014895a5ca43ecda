package daemon

import (
	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/selector"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/sirupsen/logrus"
)

// withSelector puts rules/selector between the store and the datapath when
// the store is etcd (endpointSelector rules follow engine
// registrations). It returns what the store installs into, what the API
// reads status from, and the closer (nil without etcd).
func withSelector(rt store.Runtime, shared *etcdstore.Backend, m *metrics.Metrics, log logrus.FieldLogger) (store.Runtime, api.StatusSource, func() error) {
	st, _ := rt.(api.StatusSource)
	if shared == nil {
		return selector.WithoutRegistry(rt), st, nil
	}
	o := selector.DefaultOptions()
	o.Inner, o.Status = rt, st
	o.Client, o.Prefix = shared.Client(), shared.Prefix()
	o.OnRefused = func(class string) { m.Store.RegistrationsRefused.WithLabelValues(class).Inc() }
	o.Log = log
	sel := selector.New(o)
	return sel, sel, sel.Close
}
