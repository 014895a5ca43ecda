//go:build !linux

package h1

// watcher is not implemented off Linux: a client that goes away is seen
// on the next write of its response.
type watcher struct{}

func newWatcher(*Server) *watcher { return nil }

func (w *watcher) stop() {}
