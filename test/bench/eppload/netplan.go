package main

import (
	"flag"
	"fmt"
	"net"
	"strconv"
)

// netPlan hands out the addresses a run listens on: one loopback IP for the
// EPP's listeners and the next IPs for the pool's endpoints, and ports
// either from a fixed range (base > 0, so a run on a shared machine stays
// inside the block it was given) or free ones the kernel picks (base 0, so
// two runs side by side never collide).
type netPlan struct {
	ip   net.IP // the EPP's address; endpoint i is ip+1+i
	base int    // first port of the range; 0: free ports
	next int
}

// newNetPlan plans for endpoints pool endpoints, whose IPs must stay
// inside ip's /24 (past .254 they would wrap onto .255, .0 and the block's
// low addresses, the EPP's own among them).
func newNetPlan(ip string, base, endpoints int) (*netPlan, error) {
	p := net.ParseIP(ip).To4()
	if p == nil || !p.IsLoopback() {
		return nil, fmt.Errorf("-ip %q: want an IPv4 loopback address", ip)
	}
	if last := int(p[3]) + endpoints; last > 254 {
		return nil, fmt.Errorf("-ip %s: its %d endpoints would run past .254 of the block (to .%d)", ip, endpoints, last)
	}
	if base < 0 || base > 65535-64 {
		return nil, fmt.Errorf("-port-base %d: want 0 or a port below %d", base, 65535-64)
	}
	return &netPlan{ip: p, base: base}, nil
}

// host is the EPP's IP.
func (p *netPlan) host() string { return p.ip.String() }

// endpointIP is the address of the pool's endpoint i.
func (p *netPlan) endpointIP(i int) string {
	ip := make(net.IP, 4)
	copy(ip, p.ip)
	ip[3] += byte(1 + i)
	return ip.String()
}

// port returns the next port of the range, or a free one.
func (p *netPlan) port() (int, error) {
	if p.base == 0 {
		return freePort(p.host())
	}
	n := p.base + p.next
	p.next++
	return n, nil
}

// rest is the first port not yet handed out (0 with free ports): the
// -port-base of the serve child.
func (p *netPlan) rest() int {
	if p.base == 0 {
		return 0
	}
	return p.base + p.next
}

// addr is host:port() on the EPP's IP.
func (p *netPlan) addr() (string, error) {
	n, err := p.port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(p.host(), strconv.Itoa(n)), nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// parseAll parses args and refuses a word left over: flag parsing stops
// at the first word that is not a flag, so the flags after it (an -ip, a
// -port-base) would otherwise be dropped and the run would start at the
// defaults, outside the block it was asked to keep to.
func parseAll(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags only; the flags after it were not read)", fs.Arg(0))
	}
	return nil
}
