package datapath

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

// freePort is a port free on every address (a wildcard probe listener
// binds it, which any listener on any address would refuse) and outside
// the ephemeral range, so no client's source port takes it before the
// test binds it. Where the ephemeral range leaves fewer than 1,000 ports
// of the test range, the kernel chooses, as before.
func freePort(t testing.TB) uint16 {
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
		return uint16(p)
	}
	t.Fatalf("no port in %d–%d free on every address in 100 draws", from, to-1)
	return 0
}

// kernelPort is a port the kernel chose for a wildcard listener (free on
// every address, but ephemeral).
func kernelPort(t testing.TB) uint16 {
	t.Helper()
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// freePort's ports are outside the kernel's ephemeral range, free, and the
// range arithmetic keeps the larger side of a range that splits the test
// ports.
func TestFreePortOutsideEphemeralRange(t *testing.T) {
	for _, tc := range []struct {
		lo, hi   int
		from, to int
	}{
		{32768, 60999, 10000, 30000}, // Linux's default: all below
		{15000, 60999, 10000, 15000}, // a low range: the part below
		{1024, 12000, 12001, 30000},  // a range ending inside: the part above
		{1024, 65535, 10000, 1024},   // no room: fewer than 1,000 ports, the kernel chooses
		{12000, 13000, 13001, 30000}, // a range splitting the test ports: the larger side
	} {
		from, to := testPortRange(tc.lo, tc.hi)
		if from != tc.from || to != tc.to {
			t.Errorf("ephemeral %d–%d: test ports %d–%d, want %d–%d", tc.lo, tc.hi, from, to, tc.from, tc.to)
		}
	}
	lo, hi := ephemeralPorts()
	for range 20 {
		p := int(freePort(t))
		if p >= lo && p <= hi {
			t.Fatalf("freePort gave %d, inside the ephemeral range %d–%d a client's source port is drawn from", p, lo, hi)
		}
		for _, ip := range []string{"127.0.0.1", "127.0.0.3", "127.0.0.29"} {
			l, err := net.Listen("tcp4", net.JoinHostPort(ip, strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("freePort gave %d, not free on %s: %v", p, ip, err)
			}
			_ = l.Close()
		}
	}
}
