package selector

import (
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/spec"
)

// WithoutRegistry wraps the runtime of a gateway whose store is the local
// file: there is no registry to read, so a selector rule is refused with a
// 400 instead of being served with no endpoints forever.
func WithoutRegistry(inner store.Runtime) store.Runtime { return noRegistry{inner} }

type noRegistry struct{ store.Runtime }

func (n noRegistry) Install(prev, next *spec.Rule) error {
	if next.EndpointSelector != nil {
		return apierror.BadRequest(apierror.CodeUnsupported, "endpointSelector",
			"endpointSelector needs the shared store",
			"endpointSelector takes endpoints from engine registrations in etcd: start the gateway with --store etcd://…")
	}
	return n.Runtime.Install(prev, next)
}

// RemoveMany passes a batch removal through (store.BatchRemover).
func (n noRegistry) RemoveMany(rs []*spec.Rule) { store.RemoveAll(n.Runtime, rs) }
