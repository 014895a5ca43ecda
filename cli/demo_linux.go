package cli

import "syscall"

// childProcAttr makes the kernel kill an engine if the demo dies without
// cleaning up (SIGKILL, crash), so no orphan keeps a port.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
