package main

import (
	"fmt"
	"syscall"

	"github.com/infergate/infergate/internal/rawsock"
)

// The two raw socket steps both raw designs take (rawConn and the epoll
// loop), on non-blocking sockets: no syscall bookkeeping, EAGAIN reported
// rather than waited on, so each design does its own waiting.

// readState is what one readPipe call found.
type readState uint8

const (
	readEmpty   readState = iota // EAGAIN: nothing to read until the next readiness
	readDrained                  // some bytes, fewer than the room: the socket is empty now
	readFull                     // the room filled: more may wait
)

// readPipe reads once from fd into q; the peer's close is errClosed.
func readPipe(fd uintptr, q *pipe) (readState, error) {
	sp, err := q.space()
	if err != nil {
		return readEmpty, err
	}
	for {
		n, errno := rawsock.Read(fd, sp)
		switch errno {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return readEmpty, nil
		default:
			return readEmpty, fmt.Errorf("floor: read: %w", errno)
		}
		if n == 0 {
			return readEmpty, errClosed
		}
		q.filled(n)
		if n < len(sp) {
			return readDrained, nil
		}
		return readFull, nil
	}
}

// writeSome writes p to fd until it is all out or the socket has no
// room (blocked).
func writeSome(fd uintptr, p []byte) (n int, blocked bool, err error) {
	for n < len(p) {
		k, errno := rawsock.Write(fd, p[n:])
		switch errno {
		case 0:
			n += k
		case syscall.EINTR:
		case syscall.EAGAIN:
			return n, true, nil
		default:
			return n, false, fmt.Errorf("floor: write: %w", errno)
		}
	}
	return n, false, nil
}
