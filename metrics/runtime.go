package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Runtime is the Go runtime's and the process's own families (go_*,
// process_*), from client_golang's standard collectors: goroutines, heap,
// GC pauses, CPU seconds, resident memory and open descriptors are what an
// operator sizing replicas or chasing a leak looks at first, and the edge
// caps are sized from the descriptor limit.
type Runtime struct {
	Go      prometheus.Collector // go_*
	Process prometheus.Collector // process_*
}

// NewRuntime builds the runtime collectors and registers them on reg.
func NewRuntime(reg prometheus.Registerer) *Runtime {
	r := &Runtime{
		Go:      collectors.NewGoCollector(),
		Process: collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	reg.MustRegister(r.Go, r.Process)
	return r
}
