package pd_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// rankIDs is an EngineIDSource that also knows engines per DP rank, read
// from a prefill's bootstrap /query as the datapath reads it.
type rankIDs map[string]pd.MooncakeRanks

func (m rankIDs) KVEngineID(id string) string {
	for _, r := range m[id] {
		if r.Rank == 0 {
			return r.EngineID
		}
	}
	return ""
}

func (m rankIDs) KVEngineRanks(id string) pd.MooncakeRanks { return m[id] }

// dpFleet is a Mooncake fleet whose prefill runs dp ranks, its engines
// learned from its bootstrap server (no kv_engine_id label).
func dpFleet(t *testing.T, dp int) (*fleet, spec.Endpoint) {
	t.Helper()
	start := func(addr string, role pdfake.Role) *pdfake.Engine {
		return startVLLMFake(t, addr, role, func(c *pdfake.Config) { c.Connector, c.DPSize = pdfake.ConnectorMooncake, dp })
	}
	f := &fleet{engine: spec.EngineVLLM}
	f.prefill = start("127.0.0.2:0", pdfake.Prefill)
	f.dec = start("127.0.0.4:0", pdfake.Decode)
	f.rule = &spec.Rule{Name: "rule-mooncake-dp", Engine: spec.EngineVLLM, Key: spec.Key{ModelName: "m"}, PD: &spec.PD{}}
	p := f.prefill.Endpoint()
	p.Labels = nil
	resp, err := http.Get(pd.MooncakeQueryURL(p))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ranks, ok := pd.ParseMooncakeRanks(body)
	if !ok || len(ranks) != dp {
		t.Fatalf("/query %s: %v %v, want %d ranks", body, ranks, ok, dp)
	}
	f.ids = rankIDs{p.ID: ranks}
	return f, p
}

// TestMooncakeDPRanks: with a multi-rank prefill every prefill leg is
// pinned to one rank (X-data-parallel-rank) and the decode names that
// rank's engine, so its pull finds the transfer (the fake decode asks the
// named engine's worker, as vLLM's does); the KV-exact tier's rank is
// used when the prefill lists it.
func TestMooncakeDPRanks(t *testing.T) {
	tests := []struct {
		name     string
		rank     int
		has      bool
		want     int // -1: any listed rank
		requests int
	}{
		{"KV-exact rank", 2, true, 2, 2},
		{"no known rank", 0, false, -1, 8},
		{"KV-exact rank not listed", 7, true, -1, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, p := dpFleet(t, 4)
			d := mustDialect(t, spec.EngineVLLM)
			pair := pd.Pair{Prefill: p, Decode: f.dec.Endpoint(), PrefillDPRank: tc.rank, HasPrefillDPRank: tc.has}
			for i := range tc.requests {
				res := f.do(t, d, pathCompletions, clientBody(pathCompletions, i%2 == 1), pair, 0)
				if res.status != 200 || res.out.KVTransferFailed || res.out.PrefillSkipped != "" {
					t.Fatalf("request %d: client got %d, outcome %+v: %s", i, res.status, res.out, res.body)
				}
			}
			pre, dec := waitLegs(t, f.prefill, tc.requests), waitLegs(t, f.dec, tc.requests)
			for i := range pre {
				rank, err := strconv.Atoi(pre[i].Header.Get("X-data-parallel-rank"))
				if err != nil || rank < 0 || rank >= 4 || (tc.want >= 0 && rank != tc.want) {
					t.Fatalf("prefill leg %d rank header %q, want %d (-1: any of 0..3)", i, pre[i].Header.Get("X-data-parallel-rank"), tc.want)
				}
				pk, dk := kvParams(t, pre[i].Body), kvParams(t, dec[i].Body)
				if got, want := string(dk["remote_engine_id"]), `"`+f.prefill.RankEngineID(rank)+`"`; got != want {
					t.Errorf("decode leg %d names %s, want rank %d's %s", i, got, rank, want)
				}
				var tid string
				_ = json.Unmarshal(pk["transfer_id"], &tid)
				if r := f.prefill.TransferRank(tid); r != rank {
					t.Errorf("transfer %s ran on rank %d, header said %d", tid, r, rank)
				}
			}
			noViolations(t, f.prefill, f.dec)
		})
	}
}

// TestMooncakeDPRanksUnknown: a prefill labelled dp_size > 1 whose ranks
// were not read yet gets no leg (its one kv_engine_id label cannot name
// the rank a leg lands on); the decode computes the prompt, as for an
// unknown engine id.
func TestMooncakeDPRanksUnknown(t *testing.T) {
	f, p := dpFleet(t, 2)
	f.ids = nil
	p.Labels = map[string]string{"kv_engine_id": f.prefill.RankEngineID(0), "dp_size": "2"}
	res := f.do(t, mustDialect(t, spec.EngineVLLM), pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: p, Decode: f.dec.Endpoint()}, 0)
	if res.status != 200 || res.out.PrefillSkipped != pd.SkipNoEngineID || !res.out.KVTransferFailed {
		t.Fatalf("client got %d, outcome %+v", res.status, res.out)
	}
	if n := len(f.prefill.Records()); n != 0 {
		t.Errorf("prefill received %d legs", n)
	}
	r := &spec.Rule{Engine: spec.EngineVLLM, PD: &spec.PD{}, Endpoints: []spec.Endpoint{p}}
	if !pd.LearnsMooncakeEngineID(r, 0) {
		t.Error("a labelled prefill with dp_size 2 does not have its ranks read")
	}
}

func TestParseMooncakeRanks(t *testing.T) {
	tests := map[string]string{ // body → "rank=id,…" ("" = refused)
		`{"0":{"engine_id":"e_dp0"}}`: "0=e_dp0",
		`{"1":{"engine_id":"e_dp1","worker_addr":{"0":{"0":"tcp://h:1"}}},"0":{"engine_id":"e_dp0"}}`: "0=e_dp0,1=e_dp1",
		`{"3":{"engine_id":"e_dp3"}}`:                            "3=e_dp3",
		`{"0":{"engine_id":"a"},"1":{"engine_id":"two words"}}`:  "",
		`{"0":{"engine_id":"a"},"01":{"engine_id":"b"}}`:         "",
		`{"-1":{"engine_id":"a"}}`:                               "",
		`{"65536":{"engine_id":"a"}}`:                            "",
		`{"x":{"engine_id":"a"}}`:                                "",
		`{}`:                                                     "",
		`{"0":{"engine_id":"` + strings.Repeat("x", 257) + `"}}`: "",
		`not json`: "",
	}
	for body, want := range tests {
		ranks, ok := pd.ParseMooncakeRanks([]byte(body))
		var got []string
		for _, r := range ranks {
			got = append(got, fmt.Sprintf("%d=%s", r.Rank, r.EngineID))
		}
		if g := strings.Join(got, ","); g != want || ok != (want != "") {
			t.Errorf("%.60s: %q %v, want %q", body, g, ok, want)
		}
	}
}
