package metrics

import "github.com/prometheus/client_golang/prometheus"

// Tenant covers API-key enforcement on VIPs. Cardinality is bounded by what
// operators create: tenant and key_id come from the key store (at most
// MaxKeysPerTenant keys a tenant); model is the request's model only when the
// key has an allow-list (so it is one of those names), else "any".
type Tenant struct {
	Requests   *prometheus.CounterVec // infergate_tenant_requests_total{tenant,key_id,model}
	Tokens     *prometheus.CounterVec // infergate_tenant_tokens_total{tenant,key_id,model,kind}
	Rejections *prometheus.CounterVec // infergate_tenant_rejections_total{tenant,key_id,reason}
	// KeyStoreUnreadable is 1 while the shared key document cannot be read
	// (the replica serves the keys it had, or none).
	KeyStoreUnreadable prometheus.Gauge // infergate_tenant_keystore_unreadable
}

// NewTenant builds and registers the tenant families.
func NewTenant(reg prometheus.Registerer) *Tenant {
	t := &Tenant{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_tenant_requests_total",
			Help: "Requests admitted on VIPs that enforce API keys, by tenant, key id and model.",
		}, []string{"tenant", "key_id", "model"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_tenant_tokens_total",
			Help: "Tokens charged to a key: kind prompt or completion from the engine's usage, estimated when the engine reported none.",
		}, []string{"tenant", "key_id", "model", "kind"}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_tenant_rejections_total",
			Help: "Requests refused by API-key enforcement, by reason (the error code); tenant and key_id are empty when no valid key was presented.",
		}, []string{"tenant", "key_id", "reason"}),
		KeyStoreUnreadable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_tenant_keystore_unreadable",
			Help: "1 while the shared API-key document (etcd <prefix>/tenant/apikeys) cannot be read: the replica keeps the keys in force, or serves none after a boot.",
		}),
	}
	reg.MustRegister(t.Requests, t.Tokens, t.Rejections, t.KeyStoreUnreadable)
	return t
}
