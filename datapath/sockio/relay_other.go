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
