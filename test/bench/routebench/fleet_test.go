package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/test/enginesim"
)

// The in-process fleet takes the enginesim command's flags.
func TestFleetOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		check   func(t *testing.T, first string, engines, port, maxSeqs int, step time.Duration)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, first string, engines, port, _ int, _ time.Duration) {
			if first != "127.0.0.101" || engines != 8 || port != 18000 {
				t.Errorf("defaults: %s %d %d", first, engines, port)
			}
		}},
		{name: "bench and extra flags", args: []string{"--engines", "4", "--first-ip", "127.0.0.161", "--port", "26000", "--max-num-seqs", "8", "--decode-step", "20ms"},
			check: func(t *testing.T, first string, engines, port, maxSeqs int, step time.Duration) {
				if first != "127.0.0.161" || engines != 4 || port != 26000 || maxSeqs != 8 || step != 20*time.Millisecond {
					t.Errorf("parsed: %s %d %d %d %v", first, engines, port, maxSeqs, step)
				}
			}},
		{name: "unknown flag", args: []string{"--no-such"}, wantErr: "no-such"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected"},
		{name: "bad address", args: []string{"--first-ip", "nope"}, wantErr: "--first-ip"},
	} {
		o, err := fleetOptions("enginesim", tc.args)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tc.check(t, o.FirstIP.String(), o.Both, o.Port, o.Engine.MaxNumSeqs, o.Engine.DecodeStep)
	}
}

// Each kv run pairs with the rr run of its workload and load; the summary
// gives the median and range of the net ratios.
func TestCPUPairs(t *testing.T) {
	runs := []*runSummary{
		{Workload: "shared-prefix", Arm: armRR, Load: 0.7, CPUPerReqMs: 10, CPUGrossPerReqMs: 20},
		{Workload: "shared-prefix", Arm: armKV, Load: 0.7, CPUPerReqMs: 12, CPUGrossPerReqMs: 22},
		{Workload: "shared-prefix", Arm: armPrefix, Load: 0.7, CPUPerReqMs: 30, CPUGrossPerReqMs: 40},
		{Workload: "shared-prefix", Arm: armRR, Load: 1.5, CPUPerReqMs: 8, CPUGrossPerReqMs: 16, Unanswered: 5},
		{Workload: "shared-prefix", Arm: armKV, Load: 1.5, CPUPerReqMs: 6, CPUGrossPerReqMs: 12},
		{Workload: "multi-turn", Arm: armRR, Load: 0.5, CPUPerReqMs: 20, CPUGrossPerReqMs: 25},
		{Workload: "multi-turn", Arm: armKV, Load: 0.5, CPUPerReqMs: 30, CPUGrossPerReqMs: 35},
		{Workload: "multi-turn-noid", Arm: armKV, Load: 0.5, CPUPerReqMs: 30}, // no rr run: no pair
	}
	pairs := cpuPairs(runs, armRR)
	if len(pairs) != 3 {
		t.Fatalf("%d pairs, want 3: %+v", len(pairs), pairs)
	}
	want := []struct {
		name       string
		net, gross float64
	}{{"shared-prefix 70%", 1.2, 1.1}, {"shared-prefix 150%", 0.75, 0.75}, {"multi-turn 50%", 1.5, 1.4}}
	for i, w := range want {
		p := pairs[i]
		if p.name != w.name || !near(p.net, w.net) || !near(p.gross, w.gross) {
			t.Errorf("pair %d = %+v, want %+v", i, p, w)
		}
	}
	// A workload and load run again later (--busy-engine's shared prefix
	// at 70 %): each kv run pairs with its own neighbour only.
	again := append(runs[:len(runs):len(runs)],
		&runSummary{Workload: "shared-prefix", Arm: armRR, Load: 0.7, CPUPerReqMs: 5, CPUGrossPerReqMs: 10},
		&runSummary{Workload: "shared-prefix", Arm: armKV, Load: 0.7, CPUPerReqMs: 10, CPUGrossPerReqMs: 30})
	if got := cpuPairs(again, armRR); len(got) != 4 || !near(got[0].net, 1.2) || !near(got[3].net, 2) || !near(got[3].gross, 3) {
		t.Errorf("with shared prefix at 70%% run twice: %+v, want the first run's pair 1.2× and the second's 2×", got)
	}
	var out bytes.Buffer
	writeCPUPairs(&out, pairs, 25)
	for _, s := range []string{"median 1.20×, range 0.75–1.50× over 3 pairs", "(unanswered: rr 5, kv 0)", "idle 25.0 ms/s"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("summary lacks %q:\n%s", s, out.String())
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// An in-process fleet serves on the addresses its flags name, with the
// tokenizer the caller loaded, and stops.
func TestInProcessFleet(t *testing.T) {
	tok, tmpl, err := enginesim.LoadTokenizer(pickTokenizer)
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	f, err := launchSimFleet("enginesim", "", io.Discard, []string{"--engines", "1", "--first-ip", "127.0.0.1", "--port", fmt.Sprint(port), "--zmq-port", "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop(time.Second)
	if err := f.ready(tok, tmpl); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/tokenize", port), "application/json", strings.NewReader(`{"model":"sim-8b","prompt":" hello world"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("tokenize: %d %v", resp.StatusCode, err)
	}
	if want := tok.Encode(" hello world", false); !slices.Equal(got.Tokens, want) {
		t.Errorf("engine tokens %v, the caller's tokenizer %v", got.Tokens, want)
	}
}
