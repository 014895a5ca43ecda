package cli

import (
	"github.com/infergate/infergate/daemon"
	"github.com/spf13/pflag"
)

// addEPPFlags binds the endpoint picker's options (docs/epp.md) into opts.
func addEPPFlags(fl *pflag.FlagSet, opts *daemon.Options) {
	fl.StringVar(&opts.EPP.Addr, "epp-addr", opts.EPP.Addr, "serve the Gateway API Inference Extension endpoint picker (Envoy ext_proc gRPC) here, e.g. :9002; empty: off")
	fl.StringVar(&opts.EPP.HealthAddr, "epp-health-addr", opts.EPP.HealthAddr, "endpoint picker gRPC health listener (services liveness, readiness, envoy.service.ext_proc.v3.ExternalProcessor)")
	fl.StringVar(&opts.EPPRule, "epp-rule", opts.EPPRule, "the rule (name, or key of an unnamed rule) whose endpoints and ladder the endpoint picker picks from; required with --epp-addr")
	fl.Int64Var(&opts.EPP.MaxBodyBytes, "epp-max-body-bytes", opts.EPP.MaxBodyBytes, "largest request body the endpoint picker buffers to pick (413 above)")
	fl.Int64Var(&opts.EPP.BodyBudgetBytes, "epp-body-budget-bytes", opts.EPP.BodyBudgetBytes, "request bodies and headers all ext_proc streams may hold at once, at least --epp-max-body-bytes + 1 MiB for headers (a stream past it: 429 body_memory_exhausted)")
	fl.IntVar(&opts.EPP.MaxStreams, "epp-max-streams", opts.EPP.MaxStreams, "ext_proc streams open at once over all connections (a stream past it: 429 too_many_streams; 0: no cap)")
	fl.IntVar(&opts.EPP.MaxEndpoints, "epp-max-endpoints", opts.EPP.MaxEndpoints, "cap on addresses per pick (0: primary and every fallback); 1 for an Envoy ORIGINAL_DST cluster")
	fl.StringVar(&opts.EPP.DestinationNamespace, "epp-destination-namespace", opts.EPP.DestinationNamespace, "dynamic-metadata namespace of the pick and of the served-endpoint report")
	fl.StringVar(&opts.EPP.SubsetNamespace, "epp-subset-namespace", opts.EPP.SubsetNamespace, "filter-metadata namespace of the proxy's subset hint")
	fl.StringVar(&opts.EPP.RefusalReasonHeader, "epp-refusal-reason-header", opts.EPP.RefusalReasonHeader, "response header carrying the reason of a 429/503/413 the endpoint picker answers itself")
	fl.DurationVar(&opts.EPP.DrainTimeout, "epp-drain-timeout", opts.EPP.DrainTimeout, "on shutdown, how long open ext_proc streams may finish before they are cut")
	t := &opts.EPP.Transport
	fl.Int32Var(&t.StreamWindow, "epp-stream-window", t.StreamWindow, "ext_proc gRPC per-stream receive window in bytes, at least 65536; set with --epp-conn-window, they fix the windows (0 for both: gRPC's dynamic windows, probed by a ping per round trip; one alone is refused)")
	fl.Int32Var(&t.ConnWindow, "epp-conn-window", t.ConnWindow, "ext_proc gRPC per-connection receive window in bytes, at least 65536 (see --epp-stream-window)")
	fl.IntVar(&t.WriteBuffer, "epp-write-buffer", t.WriteBuffer, "ext_proc gRPC connection write buffer in bytes (0: gRPC's 32 KiB; negative: none)")
	fl.IntVar(&t.ReadBuffer, "epp-read-buffer", t.ReadBuffer, "ext_proc gRPC connection read buffer in bytes (0: gRPC's 32 KiB; negative: none)")
	fl.Uint32Var(&t.MaxConcurrentStreams, "epp-max-concurrent-streams", t.MaxConcurrentStreams, "streams one proxy connection may have open at once (0: no cap)")
	fl.IntVar(&opts.EPP.StreamWorkers, "epp-stream-workers", opts.EPP.StreamWorkers, "long-lived goroutines serving ext_proc streams, so a pick's deep stack is grown once, not per stream (0: a goroutine per stream)")
}
