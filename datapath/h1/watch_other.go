//go:build !linux

package h1

// Watcher is not implemented off Linux: a client that goes away is seen
// on the next write of its response.
type Watcher struct{}

// NewWatcher returns nil off Linux.
func NewWatcher() *Watcher { return nil }

// Close does nothing.
func (w *Watcher) Close() {}

func (w *Watcher) add(*conn)    {}
func (w *Watcher) remove(*conn) {}
