// Package testport hands tests a TCP port to bind later, outside the
// kernel's ephemeral range so no client's source port takes it first.
package testport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Test ports come from testPortLow–testPortHigh minus the kernel's
// ephemeral range (Linux's ip_local_port_range, 32768–60999 by default),
// which connect(2) and listen on port 0 never draw from. A port the kernel
// chose for a probe listener was ephemeral: between the probe's close and
// the rule's bind, a client in a package tested in parallel could take it
// as its source port (twice in make test, on 127.0.0.1 and 127.0.0.3).
// Outside that range only an explicit bind can take a probed port, and the
// draw is random over thousands of ports, so two tests rarely probe one.
const testPortLow, testPortHigh = 10000, 30000

// Linux's default ephemeral range, for systems that do not say.
const ephemeralLow, ephemeralHigh = 32768, 60999

// ephemeralPorts reads the kernel's ephemeral port range.
func ephemeralPorts() (lo, hi int) {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return ephemeralLow, ephemeralHigh
	}
	f := strings.Fields(string(raw))
	if len(f) != 2 {
		return ephemeralLow, ephemeralHigh
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo > hi {
		return ephemeralLow, ephemeralHigh
	}
	return lo, hi
}

// testPortRange is the widest part of testPortLow–testPortHigh (end
// exclusive) outside the ephemeral range lo–hi (inclusive).
func testPortRange(lo, hi int) (from, to int) {
	below := [2]int{testPortLow, min(testPortHigh, lo)}
	above := [2]int{max(testPortLow, hi+1), testPortHigh}
	if above[1]-above[0] > below[1]-below[0] {
		return above[0], above[1]
	}
	return below[0], below[1]
}

// Free is a port free on every address (a wildcard probe listener
// binds it, which any listener on any address would refuse) and outside
// the ephemeral range, so no client's source port takes it before the
// test binds it. Where the ephemeral range leaves fewer than 1,000 ports
// of the test range, the kernel chooses, as before.
func Free(t testing.TB) int {
	t.Helper()
	from, to := testPortRange(ephemeralPorts())
	if to-from < 1000 {
		return kernelPort(t)
	}
	for range 100 {
		p := from + rand.IntN(to-from)
		l, err := net.Listen("tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(p)))
		if err != nil {
			continue // in use on some address
		}
		_ = l.Close()
		return p
	}
	t.Fatalf("no port in %d–%d free on every address in 100 draws", from, to-1)
	return 0
}

// kernelPort is a port the kernel chose for a wildcard listener (free on
// every address, but ephemeral).
func kernelPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
