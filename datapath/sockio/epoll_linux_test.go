//go:build linux

package sockio

import (
	"syscall"
	"testing"
	"time"
)

// TestEpoll runs the set the watchers wait on through the netpoller: an
// empty set's wait ends with nothing, a peer's hang-up is reported under
// the id it was registered with, Close ends a wait in progress, and the
// closed set refuses Ctl.
func TestEpoll(t *testing.T) {
	var events [4]syscall.EpollEvent
	ep, err := NewEpoll()
	if err != nil {
		t.Fatalf("NewEpoll: %v", err)
	}

	if n, err := ep.Wait(events[:], 10*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("empty set: Wait = %d, %v; want 0, nil", n, err)
	}

	c, peer := pair(t)
	fd := sockFD(t, c.NetConn())
	const id = 7
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | epollET, Fd: id}
	if err := ep.Ctl(syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		t.Fatal(err)
	}
	if n, err := ep.Wait(events[:], 10*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("open peer: Wait = %d, %v; want 0, nil", n, err)
	}
	_ = peer.Close()
	n, err := ep.Wait(events[:], 10*time.Second)
	if err != nil || n != 1 || events[0].Fd != id || events[0].Events&syscall.EPOLLRDHUP == 0 {
		t.Fatalf("after the peer's close: Wait = %d, %v, %+v; want the hang-up of id %d", n, err, events[0], id)
	}

	// Close while a wait is parked: the wait returns, with an error.
	if err := ep.Ctl(syscall.EPOLL_CTL_DEL, fd, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ep.Wait(events[:], time.Minute)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it park (either order passes)
	if err := ep.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("Wait ended by Close returned no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the wait")
	}
	if err := ep.Ctl(syscall.EPOLL_CTL_ADD, fd, &ev); err == nil {
		t.Error("Ctl on a closed set succeeded")
	}
}

// TestEpollMoreReadyThanBuffer: hang-ups ready together, more than Wait's
// buffer holds, all come out, one per Wait. The set's edge reaches the
// netpoller once; the ones left over must be collected by the next Wait's
// own epoll_pwait, not waited for.
func TestEpollMoreReadyThanBuffer(t *testing.T) {
	ep, err := NewEpoll()
	if err != nil {
		t.Fatalf("NewEpoll: %v", err)
	}
	defer ep.Close()
	const socks = 3
	for id := 1; id <= socks; id++ {
		c, peer := pair(t)
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | epollET, Fd: int32(id)}
		if err := ep.Ctl(syscall.EPOLL_CTL_ADD, sockFD(t, c.NetConn()), &ev); err != nil {
			t.Fatalf("Ctl ADD id %d: %v", id, err)
		}
		_ = peer.Close()
	}
	seen := map[int32]bool{}
	var one [1]syscall.EpollEvent
	for range socks {
		n, err := ep.Wait(one[:], 10*time.Second)
		if err != nil || n != 1 || seen[one[0].Fd] {
			t.Fatalf("Wait = %d, %v, id %d (seen %v); want one new hang-up", n, err, one[0].Fd, seen)
		}
		seen[one[0].Fd] = true
	}
	if n, err := ep.Wait(one[:], 10*time.Millisecond); n != 0 || err != nil {
		t.Fatalf("after every hang-up: Wait = %d, %v; want 0, nil", n, err)
	}
}
