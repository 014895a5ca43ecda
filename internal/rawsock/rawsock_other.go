//go:build !linux

package rawsock

import "syscall"

// Supported is false: callers keep net.Conn's path (and Peek, the syscall
// package's) on this platform.
const Supported = false

func Read(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOSYS }
func Write(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }
func Peek(uintptr, []byte) syscall.Errno         { return syscall.ENOSYS }

func Writev(uintptr, []byte, []byte, []byte) (int, syscall.Errno) { return 0, syscall.ENOSYS }
