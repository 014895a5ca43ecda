//go:build !linux

package sockio

// CanReadEach is false off Linux: callers read through Read.
func (c *Conn) CanReadEach() bool { return false }

// ReadEach is not available off Linux.
func (c *Conn) ReadEach(ReadHandler, *HupWatcher) error { return errNoSocket }

// HupWatcher is ReadEach's hang-up watcher (relay_linux.go); unused here.
type HupWatcher struct{}

func (c *Conn) watchHold(uintptr) {}

// StopWatchingHangUp does nothing off Linux (Hold does not run its step).
func (c *Conn) StopWatchingHangUp() {}

// peerWatch is WatchPeer's state (hup_linux.go); unused here.
type peerWatch struct{}

// WatchPeer is false off Linux: the caller peeks (Quiet) instead.
func (c *Conn) WatchPeer(*HupWatcher) bool { return false }

// PeerGone is false off Linux (nothing is watched).
func (c *Conn) PeerGone() bool { return false }

// StopWatchingPeer does nothing off Linux.
func (c *Conn) StopWatchingPeer() {}

// PeerAcked is unknown off Linux.
func (c *Conn) PeerAcked() (uint64, bool) { return 0, false }
