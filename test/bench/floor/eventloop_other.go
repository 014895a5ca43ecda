//go:build !linux

package main

import "errors"

type loopProxy struct{ addr string }

func startLoops(string, string, int, int, bool) (*loopProxy, error) {
	return nil, errors.New("floor: the epoll loop needs Linux")
}

func (*loopProxy) stop() error { return nil }
