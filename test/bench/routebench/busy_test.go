package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLegacyGatewayFlag: --legacy-gateway reaches the legacy arm's launch
// through the command line, and the legacy guard's flag is passed to that
// binary only when its own `serve --help` (a real process) lists it.
func TestLegacyGatewayFlag(t *testing.T) {
	dir := t.TempDir()
	// Fake gateways: shell scripts that print a serve help with and
	// without the flag, and one that fails.
	fake := func(name, script string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	knows := fake("knows", `[ "$1 $2" = "serve --help" ] && printf '      --kv-legacy-load-guard    KV-exact: the old in-flight guard\n      --kv-single-load-guard int\n'`)
	older := fake("older", `[ "$1 $2" = "serve --help" ] && printf '      --kv-single-load-guard int   skip a cache winner loaded this much above the least loaded (default 3)\n'`)
	broken := fake("broken", `echo "unknown command" >&2; exit 1`)
	// A flag whose name only starts like the legacy one is not it.
	lookalike := fake("lookalike", `printf '      --kv-legacy-load-guard-window duration\n'`)

	for _, tc := range []struct {
		name     string
		args     []string
		wantBin  string
		wantArgs []string
		wantErr  string
	}{
		{"own gateway, flag", nil, "bin/infergate", []string{legacyFlag}, ""},
		{"another build that knows the flag", []string{"--legacy-gateway", knows}, knows, []string{legacyFlag}, ""},
		{"an older build without it", []string{"--legacy-gateway", older}, older, nil, ""},
		{"a longer flag is not it", []string{"--legacy-gateway", lookalike}, lookalike, nil, ""},
		{"help fails", []string{"--legacy-gateway", broken}, "", nil, "unknown command"},
		{"missing binary", []string{"--legacy-gateway", filepath.Join(dir, "absent")}, "", nil, "absent"},
	} {
		cfg := parsedConfig(t, tc.args)
		bin, args, err := cfg.busy.legacyLaunch(cfg.gatewayBin, serveHelp)
		if !errorSays(err, tc.wantErr) || bin != tc.wantBin || !slices.Equal(args, tc.wantArgs) {
			t.Errorf("%s: %s %q, %v; want %s %q, error %q", tc.name, bin, args, err, tc.wantBin, tc.wantArgs, tc.wantErr)
		}
	}
}

// TestBusyArmsAndScenarios: the scenarios' arms and names as the flags give
// them; ideal only where a pinned arm means something, unknown names
// refused before the bench starts.
func TestBusyArmsAndScenarios(t *testing.T) {
	for _, tc := range []struct {
		name               string
		args               []string
		costArms, busyArms []string
		runsCost, runsBusy bool
		wantErr            string
	}{
		{"defaults", nil, []string{armRR, armKV, armKVLegacy}, []string{armRR, armKV, armKVLegacy}, true, true, ""},
		{"ideal in the cost scenario only", []string{"--busy-arms", "kv, kv-legacy,ideal"},
			[]string{armKV, armKVLegacy, armIdeal}, []string{armKV, armKVLegacy}, true, true, ""},
		{"cost scenario alone", []string{"--busy-scenarios", "cost-vs-legacy"},
			[]string{armRR, armKV, armKVLegacy}, []string{armRR, armKV, armKVLegacy}, true, false, ""},
		{"busy engine alone", []string{"--busy-scenarios", "busy-engine,"},
			[]string{armRR, armKV, armKVLegacy}, []string{armRR, armKV, armKVLegacy}, false, true, ""},
		{"unknown arm", []string{"--busy-arms", "kv,prefix"}, nil, nil, false, false, `unknown arm "prefix"`},
		{"unknown scenario", []string{"--busy-scenarios", "overload"}, nil, nil, false, false, `unknown scenario "overload"`},
		{"no round", []string{"--busy-rounds", "0"}, nil, nil, false, false, "--busy-rounds 0"},
		{"negative capacity", []string{"--busy-capacity", "-1"}, nil, nil, false, false, "--busy-capacity -1"},
	} {
		cfg := parsedConfig(t, tc.args)
		err := cfg.busy.check()
		if !errorSays(err, tc.wantErr) {
			t.Errorf("%s: check %v, want error %q", tc.name, err, tc.wantErr)
		}
		if err != nil || tc.wantErr != "" {
			continue
		}
		cost, _ := cfg.busy.armList(true)
		busy, _ := cfg.busy.armList(false)
		rc, _ := cfg.busy.runs(scenarioCost)
		rb, _ := cfg.busy.runs(scenarioBusy)
		if !slices.Equal(cost, tc.costArms) || !slices.Equal(busy, tc.busyArms) || rc != tc.runsCost || rb != tc.runsBusy {
			t.Errorf("%s: arms %v / %v, scenarios %v / %v; want %v / %v, %v / %v", tc.name, cost, busy, rc, rb,
				tc.costArms, tc.busyArms, tc.runsCost, tc.runsBusy)
		}
	}
}

// parsedConfig is the default configuration with args parsed as routebench
// parses its command line.
func parsedConfig(t *testing.T, args []string) config {
	t.Helper()
	cfg := defaultConfig()
	fs := flag.NewFlagSet("routebench", flag.ContinueOnError)
	cfg.flags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return cfg
}

// errorSays: no error when want is empty, else an error whose text holds want.
func errorSays(err error, want string) bool {
	if want == "" {
		return err == nil
	}
	return err != nil && strings.Contains(err.Error(), want)
}

// TestRoundOrder: over two rounds each arm runs once early and once late.
func TestRoundOrder(t *testing.T) {
	arms := []string{armKV, armKVLegacy, armIdeal}
	for _, tc := range []struct {
		round int
		want  []string
	}{
		{0, []string{armKV, armKVLegacy, armIdeal}},
		{1, []string{armIdeal, armKVLegacy, armKV}},
		{2, []string{armKV, armKVLegacy, armIdeal}},
		{3, []string{armIdeal, armKVLegacy, armKV}},
	} {
		if got := roundOrder(arms, tc.round); !slices.Equal(got, tc.want) {
			t.Errorf("round %d: %v, want %v", tc.round, got, tc.want)
		}
	}
	if !slices.Equal(arms, []string{armKV, armKVLegacy, armIdeal}) {
		t.Errorf("the arms given were reordered: %v", arms)
	}
	if cfg := parsedConfig(t, []string{"--busy-rounds", "3", "--busy-capacity", "15.3"}); cfg.busy.rounds != 3 || cfg.busy.capacity != 15.3 || cfg.busy.check() != nil {
		t.Errorf("--busy-rounds 3 --busy-capacity 15.3: rounds %d, capacity %v, check %v", cfg.busy.rounds, cfg.busy.capacity, cfg.busy.check())
	}
}
