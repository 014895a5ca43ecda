package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procIO is a process's read and write system calls so far, from
// /proc/<pid>/io (syscr, syscw): a count the neighbours on a shared
// machine do not change, unlike its CPU time. Almost all of an EPP's are
// its gRPC connections' socket reads and writes, so per pick they show
// how many frames batches the transport reads and writes.
type procIO struct{ reads, writes uint64 }

func readProcIO(pid int) (procIO, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return procIO{}, fmt.Errorf("proc io of %d: %w", pid, err)
	}
	var io procIO
	var seen int
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "syscr":
			io.reads, seen = n, seen|1
		case "syscw":
			io.writes, seen = n, seen|2
		}
	}
	if seen != 3 {
		return procIO{}, fmt.Errorf("proc io of %d: no syscr/syscw", pid)
	}
	return io, nil
}
