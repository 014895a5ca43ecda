//go:build !linux

package sockio

import "net"

// CanReadEach is false off Linux: callers read through Read.
func (c *Conn) CanReadEach() bool { return false }

// ReadEach is not available off Linux.
func (c *Conn) ReadEach(ReadHandler, *HupWatcher, *EachState) error { return errNoSocket }

// eachOp is ReadEach's state (relay_linux.go); unused here.
type eachOp struct{}

// ReadAt is Linux's (relay_linux.go): no loop reads here.
func (st *EachState) ReadAt() Mono { return NoDeadline }

// HupWatcher is ReadEach's hang-up watcher (relay_linux.go); unused here.
type HupWatcher struct{}

// hupWatch is a Conn's hang-up watch (hup_linux.go); unused here.
type hupWatch struct {
	w    *HupWatcher
	wake net.Conn
}

// joinHold is false off Linux: Hold's step reads on to EAGAIN.
func (h *hupWatch) joinHold(uintptr) bool { return false }

// StopWatchingHangUp does nothing off Linux (Hold does not run its step).
func (c *Conn) StopWatchingHangUp() {}

// WatchPeer is false off Linux: the caller peeks (Quiet) instead.
func (c *Conn) WatchPeer(*HupWatcher) bool { return false }

// PeerGone is false off Linux (nothing is watched).
func (c *Conn) PeerGone() bool { return false }

// StopWatchingPeer does nothing off Linux.
func (c *Conn) StopWatchingPeer() {}

// PeerAcked is unknown off Linux.
func (c *Conn) PeerAcked() (uint64, bool) { return 0, false }

// Loops runs ReadEach off the caller's goroutine on Linux; unused here.
type Loops struct{}

// stashWrite is Linux's (loop_linux.go); nothing is stashed here.
func (c *Conn) stashWrite([]byte, bool) bool { return false }

// wakeLoop is Linux's (loop_linux.go).
func (c *Conn) wakeLoop() {}
