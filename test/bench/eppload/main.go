// Command eppload drives an endpoint picker (EPP) the way an Envoy data
// plane does — one ext_proc stream per request over loopback gRPC: request
// headers, the body in FULL_DUPLEX_STREAMED slices, the pick, the re-emitted
// body, then the response path with the served endpoint — and reports what
// the EPP's performance targets are stated in: picks per second per core of the EPP
// process (its user+system CPU time from /proc), pick latency percentiles
// (headers sent → pick received), and, for an EPP it started itself, heap
// allocations per pick and the live heap after GC before and after the run.
//
//	eppload                                   # starts `eppload serve` (16 endpoints, KV-exact fed by fake engines' KV events) and drives it
//	eppload -concurrency 64 -duration 30s -json out.json
//	eppload -concurrency 1 -driver lean -perf # HTTP/2 frames on one goroutine (no gRPC client); wake-ups per pick
//	eppload -addr 127.0.0.1:9002 -pid 1234    # an EPP someone else runs (CPU from its pid)
//	eppload serve -cpuprofile cpu.out         # the served EPP alone, for profiling
//
// On a machine shared with other work, wall-clock rates measure the
// neighbours as much as the EPP: CPU seconds per pick and allocations per
// pick are the figures to compare across runs; the load average is printed
// beside them.
package main

import (
	"fmt"
	"os"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		err = serveCmd(os.Args[2:])
	} else {
		err = runCmd(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "eppload:", err)
		os.Exit(1)
	}
}
