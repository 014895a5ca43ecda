// Package metrics defines every Prometheus metric infergate exports, in one
// place, registered on a per-daemon registry (no global state). Each area has
// its own file and struct; docs/metrics.md documents every family and a test
// checks the two agree.
package metrics

import (
	"github.com/infergate/infergate/buildinfo"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is the daemon's full metric set. Each area owner adds one field
// here and one line to New, pointing at a constructor in the area's own file.
type Metrics struct {
	Registry *prometheus.Registry
	API      *API
	KV       *KV
	PD       *PD
	Datapath *Datapath
	Radix    *Radix
	Tenant   *Tenant
	// Datapath, PD, KV and Radix are added by their owners (one file each).

	// Edge: connection admission and body memory.
	Edge  *Edge
	Store *Store // rule store backend (etcd replicas)
	// TLS: HTTPS VIPs, certificates, TLS legs to engines.
	TLS *TLS
	// BuildInfo is infergate_build_info (build.go).
	BuildInfo prometheus.Collector
	// Engine: the engines' own load, scraped from their /metrics.
	Engine *Engine
	// Flow: admission windows and the gateway queue.
	Flow *Flow
	// Runtime: the Go runtime's and the process's families (go_*, process_*).
	Runtime *Runtime
	// LLM: client-side time to first token, per token, per endpoint.
	LLM *LLM
}

// New builds and registers every metric on a fresh registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{Registry: reg}
	m.API = NewAPI(reg)
	m.KV = NewKV(reg)
	m.PD = newPD(reg)
	m.Datapath = NewDatapath(reg)
	m.Radix = NewRadix(reg)
	m.Tenant = NewTenant(reg)
	m.Edge = NewEdge(reg)
	m.Store = NewStore(reg)
	m.TLS = NewTLS(reg)
	m.BuildInfo = NewBuildInfo(reg, buildinfo.Get())
	m.Engine = NewEngine(reg)
	m.Flow = NewFlow(reg)
	m.Runtime = NewRuntime(reg)
	m.LLM = NewLLM(reg)
	return m
}
