package metrics

import (
	"github.com/infergate/infergate/buildinfo"
	"github.com/prometheus/client_golang/prometheus"
)

// NewBuildInfo registers infergate_build_info{version,commit,go} = 1, the
// usual Prometheus way to join a build's identity onto any other series
// (`* on(instance) group_left(version) infergate_build_info`). It is
// constant for the process's life, so it is a const metric with no field
// to update.
func NewBuildInfo(reg prometheus.Registerer, bi buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "infergate_build_info",
		Help: "Always 1; the labels say which build is running (version, commit, Go toolchain).",
	}, []string{"version", "commit", "go"})
	g.WithLabelValues(bi.Version, bi.Commit, bi.Go).Set(1)
	reg.MustRegister(g)
	return g
}
