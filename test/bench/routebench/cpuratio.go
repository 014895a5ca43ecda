package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// gatewayRequests is the gateway's own count of the data requests it
// answered (every status, client_closed included): the denominator of its
// CPU per request, since it covers the same interval as the /proc read —
// requests of the warm-up that finish in the window and window requests
// that finish in the drain, which the client's window count misses, and
// the requests an overloaded arm's clients gave up on, which the gateway
// still proxied.
const gatewayRequests = "infergate_datapath_requests_total"

// cpuPair is the gateway's CPU per request of the kv arm against the rr
// arm run just before it, at one workload and load.
type cpuPair struct {
	name           string
	net, gross     float64 // kv / rr
	rrLost, kvLost int     // requests without an answer (unanswered or failed)
}

// cpuPairs pairs every kv run with the nearest base-arm run of the same
// workload and load before it (the plans run base then kv). The nearest,
// not every such run: --busy-engine runs shared prefix at 70 % again after
// the main plan, and its rr run is not the main kv run's neighbour.
func cpuPairs(runs []*runSummary, base string) []cpuPair {
	var out []cpuPair
	for j, kv := range runs {
		if kv.Arm != armKV {
			continue
		}
		for i := j - 1; i >= 0; i-- {
			rr := runs[i]
			if rr.Arm != base || rr.Workload != kv.Workload || rr.Load != kv.Load {
				continue
			}
			if rr.SameAs != "" {
				break // measured beside another workload's runs, not this kv run
			}
			if rr.CPUPerReqMs > 0 && rr.CPUGrossPerReqMs > 0 {
				out = append(out, cpuPair{name: fmt.Sprintf("%s %.0f%%", kv.Workload, kv.Load*100),
					net: kv.CPUPerReqMs / rr.CPUPerReqMs, gross: kv.CPUGrossPerReqMs / rr.CPUGrossPerReqMs,
					rrLost: rr.Errors + rr.Unanswered, kvLost: kv.Errors + kv.Unanswered})
			}
			break
		}
	}
	return out
}

// writeCPUPairs prints every pair and the median and range of the net
// ratios: one pair is one sample of a noisy figure (the gateway shares the
// box with the load generator, the fleet and whatever else runs), the
// spread says how far to trust it.
func writeCPUPairs(w io.Writer, pairs []cpuPair, idleMsPerS float64) {
	if len(pairs) == 0 {
		return
	}
	fmt.Fprintf(w, "\ngateway CPU per request, kv / rr in adjacent runs (the gateway's own /proc utime+stime over the requests it answered, net of its idle %.1f ms/s; gross in brackets):\n", idleMsPerS)
	var nets []float64
	for _, p := range pairs {
		note := ""
		if p.rrLost > 0 || p.kvLost > 0 {
			note = fmt.Sprintf("  (unanswered: rr %d, kv %d)", p.rrLost, p.kvLost)
		}
		fmt.Fprintf(w, "  %-22s %5.2f× (%5.2f×)%s\n", p.name, p.net, p.gross, note)
		nets = append(nets, p.net)
	}
	slices.Sort(nets)
	med := nets[len(nets)/2]
	if len(nets)%2 == 0 {
		med = (nets[len(nets)/2-1] + nets[len(nets)/2]) / 2
	}
	var parts []string
	for _, n := range nets {
		parts = append(parts, fmt.Sprintf("%.2f", n))
	}
	fmt.Fprintf(w, "  median %.2f×, range %.2f–%.2f× over %d pairs (%s)\n", med, nets[0], nets[len(nets)-1], len(nets), strings.Join(parts, ", "))
}
