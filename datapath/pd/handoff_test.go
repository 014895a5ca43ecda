package pd

import (
	"errors"
	"testing"

	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
)

func TestCheckVLLMParams(t *testing.T) {
	const ok = `"remote_engine_id":"e1","remote_block_ids":[0,1,2]`
	tests := []struct {
		name, params string
		field        string // "" = valid
	}{
		{"nixl as vLLM sends it", `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],"remote_engine_id":"a-b","remote_host":"10.0.0.2","remote_port":5600,"remote_request_id":"r","tp_size":1}`, ""},
		{"one list per KV group", `{"remote_engine_id":"e","remote_block_ids":[[1,2],[3],[]]}`, ""},
		{"no blocks (all cached)", `{"remote_engine_id":"e","remote_block_ids":[]}`, ""},
		{"unknown fields pass", `{` + ok + `,"vendor":{"x":[1.5]}}`, ""},
		{"ipv6 host", `{` + ok + `,"remote_host":"fd00::2"}`, ""},
		{"engine id missing", `{"remote_block_ids":[1]}`, "kv_transfer_params.remote_engine_id"},
		{"engine id empty", `{"remote_engine_id":"","remote_block_ids":[1]}`, "kv_transfer_params.remote_engine_id"},
		{"engine id a number", `{"remote_engine_id":7,"remote_block_ids":[1]}`, "kv_transfer_params.remote_engine_id"},
		{"blocks missing", `{"remote_engine_id":"e"}`, "kv_transfer_params.remote_block_ids"},
		{"blocks null", `{"remote_engine_id":"e","remote_block_ids":null}`, "kv_transfer_params.remote_block_ids"},
		{"blocks an object", `{"remote_engine_id":"e","remote_block_ids":{"0":1}}`, "kv_transfer_params.remote_block_ids"},
		{"block a string", `{"remote_engine_id":"e","remote_block_ids":[1,"2"]}`, "kv_transfer_params.remote_block_ids[1]"},
		{"block a fraction", `{"remote_engine_id":"e","remote_block_ids":[1.5]}`, "kv_transfer_params.remote_block_ids[0]"},
		{"block an exponent", `{"remote_engine_id":"e","remote_block_ids":[1e3]}`, "kv_transfer_params.remote_block_ids[0]"},
		{"block negative", `{"remote_engine_id":"e","remote_block_ids":[-1]}`, "kv_transfer_params.remote_block_ids[0]"},
		{"groups mixed with ids", `{"remote_engine_id":"e","remote_block_ids":[[1],2]}`, "kv_transfer_params.remote_block_ids[1]"},
		{"ids mixed with groups", `{"remote_engine_id":"e","remote_block_ids":[1,[2]]}`, "kv_transfer_params.remote_block_ids[1]"},
		{"group nested twice", `{"remote_engine_id":"e","remote_block_ids":[[[1]]]}`, "kv_transfer_params.remote_block_ids[0][0]"},
		{"host with space", `{` + ok + `,"remote_host":"10.0.0.2 evil"}`, "kv_transfer_params.remote_host"},
		{"host with newline", `{` + ok + `,"remote_host":"h\n"}`, "kv_transfer_params.remote_host"},
		{"host empty", `{` + ok + `,"remote_host":""}`, "kv_transfer_params.remote_host"},
		{"host a number", `{` + ok + `,"remote_host":10}`, "kv_transfer_params.remote_host"},
		{"port zero", `{` + ok + `,"remote_port":0}`, "kv_transfer_params.remote_port"},
		{"port too big", `{` + ok + `,"remote_port":65536}`, "kv_transfer_params.remote_port"},
		{"port a string", `{` + ok + `,"remote_port":"5600"}`, "kv_transfer_params.remote_port"},
		{"connector port variant", `{` + ok + `,"remote_bootstrap_port":-4}`, "kv_transfer_params.remote_bootstrap_port"},
		{"tp size fraction", `{` + ok + `,"tp_size":1.5}`, "kv_transfer_params.tp_size"},
		{"tp size string", `{` + ok + `,"tp_size":"2"}`, "kv_transfer_params.tp_size"},
		{"dp size negative", `{` + ok + `,"remote_dp_size":-1}`, "kv_transfer_params.remote_dp_size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkVLLMParams([]byte(tc.params))
			var he *HandoffError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("valid handoff refused: %v", err)
			case tc.field == "":
			case !errors.As(err, &he):
				t.Fatalf("err = %v, want a HandoffError on %s", err, tc.field)
			case he.Field != tc.field:
				t.Fatalf("field = %s (%v), want %s", he.Field, err, tc.field)
			}
		})
	}
}

func TestVLLMHandoff(t *testing.T) {
	tests := []struct {
		name, body string
		params     string // relayed params; "" = none
		invalid    bool
	}{
		{"absent: decode recomputes", `{"id":"x","choices":[]}`, "", false},
		{"null: decode recomputes", `{"kv_transfer_params":null}`, "", false},
		{"body not JSON: decode recomputes", `oops`, "", false},
		{"valid relayed verbatim", `{"kv_transfer_params": {"remote_engine_id":"e","remote_block_ids":[ 1 ]} }`, `{"remote_engine_id":"e","remote_block_ids":[ 1 ]}`, false},
		{"a string", `{"kv_transfer_params":"e"}`, "", true},
		{"a list", `{"kv_transfer_params":[1]}`, "", true},
		{"malformed object", `{"kv_transfer_params":{"remote_engine_id":"e","remote_block_ids":["x"]}}`, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := vllmHandoff([]byte(tc.body))
			if (err != nil) != tc.invalid {
				t.Fatalf("err = %v, want invalid=%v", err, tc.invalid)
			}
			if string(got) != tc.params {
				t.Fatalf("params = %s, want %s", got, tc.params)
			}
		})
	}
}

func TestRecordHandoffInvalid(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.NewPD(reg)
	rule := &spec.Rule{Name: "r1"}
	Record(m, rule.Name, "m", Outcome{Status: 502, Code: CodeHandoffInvalid, FailedPhase: PhasePrefill, HandoffInvalid: true})
	Record(m, rule.Name, "m", Outcome{Status: 200})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, mm := range f.GetMetric() {
			got[f.GetName()] += mm.GetCounter().GetValue()
		}
	}
	if got["infergate_pd_handoff_invalid_total"] != 1 {
		t.Fatalf("infergate_pd_handoff_invalid_total = %v, want 1", got["infergate_pd_handoff_invalid_total"])
	}
}
