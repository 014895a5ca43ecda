package cli

import (
	"errors"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in     string
		ip     string
		weight int
		bad    bool
	}{
		{in: "127.0.0.1:3", ip: "127.0.0.1", weight: 3},
		{in: "127.0.0.1", ip: "127.0.0.1", weight: 1},
		{in: " 127.0.0.1:0 ", ip: "127.0.0.1", weight: 0},
		{in: "fd00::1:2", ip: "fd00::1", weight: 2}, // split at the last ':' (loxicmd)
		{in: "[fd00::1]:2", ip: "fd00::1", weight: 2},
		{in: "[fd00::1]", ip: "fd00::1", weight: 1},
		{in: "127.0.0.1:300", ip: "127.0.0.1", weight: 300}, // range is the server's check
		{in: "127.0.0.1:x", bad: true},
		{in: ":1", bad: true},
		{in: "[fd00::1", bad: true},
		{in: "[fd00::1]x", bad: true},
	}
	for _, tc := range tests {
		ip, w, err := parseEndpoint(tc.in)
		if tc.bad {
			if !errors.As(err, new(usageError)) {
				t.Errorf("%q: err = %v, want usage error", tc.in, err)
			}
			continue
		}
		if err != nil || ip != tc.ip || w != tc.weight {
			t.Errorf("%q: got (%q, %d, %v), want (%q, %d)", tc.in, ip, w, err, tc.ip, tc.weight)
		}
	}
}

func TestParsePortSpec(t *testing.T) {
	tests := []struct {
		in   string
		want portSpec
		bad  bool
	}{
		{in: "8080:8000", want: portSpec{port: 8080, target: 8000}},
		{in: "8080", want: portSpec{port: 8080, target: 8080}},
		{in: "8080-8090:8000", want: portSpec{port: 8080, portMax: 8090, target: 8000}},
		{in: "x:8000", bad: true},
		{in: "8080:y", bad: true},
		{in: "8080-z:1", bad: true},
		{in: "", bad: true},
	}
	for _, tc := range tests {
		got, err := parsePortSpec(tc.in)
		if tc.bad {
			if !errors.As(err, new(usageError)) {
				t.Errorf("%q: err = %v, want usage error", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseRoleSelectMode(t *testing.T) {
	roles := map[string]int{"normal": 0, "any": 0, "0": 0, "prefill": 1, "Prefill": 1, "1": 1, "decode": 2, "2": 2}
	for in, want := range roles {
		if got, err := parseRole(in); err != nil || got != want {
			t.Errorf("parseRole(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"3", "context", ""} {
		if _, err := parseRole(in); !errors.As(err, new(usageError)) {
			t.Errorf("parseRole(%q): err = %v, want usage error", in, err)
		}
	}
	sels := map[string]int{"rr": 0, "hash": 1, "priority": 2, "persist": 3, "lc": 4, "chwbl": 8, "wrr-hash": 10, "7": 7}
	for in, want := range sels {
		if got, err := parseSelect(in); err != nil || got != want {
			t.Errorf("parseSelect(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := parseSelect("random"); !errors.As(err, new(usageError)) {
		t.Errorf("parseSelect(random): err = %v, want usage error", err)
	}
	for _, in := range []string{"fullproxy", "FullProxy", "4"} {
		if got, err := parseMode(in); err != nil || got != 4 {
			t.Errorf("parseMode(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"onearm", "fullnat", "dsr", "default", "0"} {
		if _, err := parseMode(in); !errors.As(err, new(usageError)) {
			t.Errorf("parseMode(%q): err = %v, want usage error", in, err)
		}
	}
}
