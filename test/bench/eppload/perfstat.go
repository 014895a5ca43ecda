package main

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// perfEvents are the kernel's software events and system-call tracepoints
// -perf counts: each a count per pick that the neighbours of a shared
// machine do not add to (timing still moves them: how many frames one read
// finds, whether a wake-up finds its thread spinning). They say where a
// one-stream pick's CPU goes that a profile shows only as "syscalls":
// thread wake-ups (futex), poller waits (epoll_pwait), the socket's reads
// and writes, and the context switches they cost.
var perfEvents = []string{
	"context-switches", "cpu-migrations",
	"syscalls:sys_enter_futex", "syscalls:sys_enter_epoll_pwait",
	"syscalls:sys_enter_read", "syscalls:sys_enter_write",
	"syscalls:sys_enter_nanosleep", "syscalls:sys_enter_sched_yield",
}

// perfRun is `perf stat` counting perfEvents in one process over the
// measured window.
type perfRun struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func startPerf(pid int) (*perfRun, error) {
	p := &perfRun{}
	p.cmd = exec.Command("perf", "stat", "-x", ",", "-e", strings.Join(perfEvents, ","), "-p", strconv.Itoa(pid))
	p.cmd.Stderr = &p.out // perf stat reports on stderr
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf stat on %d: %w", pid, err)
	}
	return p, nil
}

// stop ends the count and returns each event's total.
func (p *perfRun) stop() (map[string]float64, error) {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	counts := map[string]float64{}
	for _, line := range strings.Split(p.out.String(), "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue // "<not counted>", "<not supported>"
		}
		counts[f[2]] = v
	}
	if len(counts) == 0 {
		return nil, fmt.Errorf("perf stat counted nothing: %s", strings.TrimSpace(p.out.String()))
	}
	return counts, nil
}

// perPick divides counts by the picks.
func perPick(counts map[string]float64, picks int64) map[string]float64 {
	out := make(map[string]float64, len(counts))
	for k, v := range counts {
		out[strings.TrimPrefix(k, "syscalls:sys_enter_")] = v / float64(picks)
	}
	return out
}

func printPerf(w io.Writer, who string, m map[string]float64) {
	if m == nil {
		return
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, " %s %.2f", k, m[k])
	}
	fmt.Fprintf(w, "  %s per pick (perf):%s\n", who, b.String())
}
