// Package proccpu reads a process's CPU time from Linux /proc, for the
// benchmarks that charge a router's CPU seconds apart from their own
// (routebench, eppload), and this process's own, for Go benchmarks that
// report CPU per operation.
package proccpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the kernel's clock tick for /proc times (USER_HZ, 100 on Linux).
const userHZ = 100

// Of is process pid's user+system CPU time from /proc/<pid>/stat.
func Of(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, errors.New("no pid")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields follow the command name, which is in parentheses and may
	// hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat of %d: no command", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat of %d: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("proc stat of %d: bad times", pid)
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// Self is this process's user+system CPU time from getrusage, to the
// microsecond where /proc counts 10 ms ticks: on a machine shared with
// other work, CPU per operation (the collector included) varies far less
// than wall time per operation, even over a short benchmark.
func Self() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
