package main

import (
	"strings"
	"testing"
)

// A word the flag set does not take (`eppload run -ip …`, a typo) stops
// flag parsing, and every flag after it would be dropped silently: the run
// would go on at the defaults — 127.0.0.1 and free ports — outside the
// block the flags asked for. Both commands refuse it before starting
// anything.
func TestStrayArgumentsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func([]string) error
		args []string
	}{
		{"run with a subcommand word", runCmd, []string{"run", "-ip", "127.0.11.1"}},
		{"run with a word after the flags", runCmd, []string{"-ip", "127.0.11.1", "extra"}},
		{"serve with a word after the flags", serveCmd, []string{"-ip", "127.0.11.1", "extra"}},
	} {
		err := tc.run(tc.args)
		if err == nil || !strings.Contains(err.Error(), "unexpected argument") {
			t.Errorf("%s: %v, want an unexpected-argument error", tc.name, err)
		}
	}
}

// The endpoints take the IPs after -ip; a plan whose last endpoint would
// run past .254 of the block is refused rather than wrapping onto .255,
// .0 and the low addresses of the block (the EPP's own among them).
func TestNetPlanEndpointsStayInBlock(t *testing.T) {
	for _, tc := range []struct {
		ip        string
		endpoints int
		ok        bool
	}{
		{"127.0.11.1", 16, true},
		{"127.0.11.1", 253, true}, // .2 … .254
		{"127.0.11.1", 254, false},
		{"127.0.11.238", 16, true}, // … .254
		{"127.0.11.239", 16, false},
		{"127.0.11.250", 16, false},
	} {
		p, err := newNetPlan(tc.ip, 0, tc.endpoints)
		if (err == nil) != tc.ok {
			t.Errorf("%s with %d endpoints: %v, want ok %v", tc.ip, tc.endpoints, err, tc.ok)
			continue
		}
		if err == nil {
			first, last := p.endpointIP(0), p.endpointIP(tc.endpoints-1)
			if first == tc.ip || !strings.HasPrefix(last, "127.0.11.") || last == "127.0.11.255" || last == "127.0.11.0" {
				t.Errorf("%s: endpoints %s … %s", tc.ip, first, last)
			}
		}
	}
}
