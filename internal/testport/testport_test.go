package testport

import (
	"net"
	"strconv"
	"testing"
)

// Free's ports are outside the kernel's ephemeral range, free, and the
// range arithmetic keeps the larger side of a range that splits the test
// ports.
func TestFreeOutsideEphemeralRange(t *testing.T) {
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
		p := Free(t)
		if p >= lo && p <= hi {
			t.Fatalf("Free gave %d, inside the ephemeral range %d–%d a client's source port is drawn from", p, lo, hi)
		}
		for _, ip := range []string{"127.0.0.1", "127.0.0.3", "127.0.0.29"} {
			l, err := net.Listen("tcp4", net.JoinHostPort(ip, strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("Free gave %d, not free on %s: %v", p, ip, err)
			}
			_ = l.Close()
		}
	}
}
