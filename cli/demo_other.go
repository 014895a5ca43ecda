//go:build !linux

package cli

import "syscall"

// childProcAttr: without Pdeathsig, engines are only stopped by the demo's
// own shutdown path.
func childProcAttr() *syscall.SysProcAttr { return nil }
