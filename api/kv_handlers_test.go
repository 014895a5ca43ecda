package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/spec"
)

type fakeKV []spec.InventoryRow

func (f fakeKV) KVInventory() []spec.InventoryRow { return f }

func TestKVInventoryRoute(t *testing.T) {
	seq, age := uint64(41), 1.5
	tests := []struct {
		name string
		src  api.KVInventorySource
		want string
	}{
		{"no source", nil, `{"rows":[]}`},
		{"nil plane", (*kvplane.Plane)(nil), `{"rows":[]}`},
		{"rows sorted by rule, endpoint, rank", fakeKV{
			{Rule: "b", Endpoint: "10.0.0.1:8000", Rank: 0, Source: "zmq", Reason: "no_events"},
			{Rule: "a", Endpoint: "10.0.0.2:8000", Rank: 1, Source: "zmq", Blocks: 3, Connected: true, Trusted: true, LastSeq: &seq, LastEventAgeSec: &age},
			{Rule: "a", Endpoint: "10.0.0.2:8000", Rank: 0, Source: "zmq", Connected: true, Reason: "warmup"},
		}, `{"rows":[` +
			`{"rule":"a","endpoint":"10.0.0.2:8000","rank":0,"source":"zmq","blocks":0,"connected":true,"trusted":false,"untrusted_reason":"warmup"},` +
			`{"rule":"a","endpoint":"10.0.0.2:8000","rank":1,"source":"zmq","blocks":3,"connected":true,"trusted":true,"last_seq":41,"last_event_age_sec":1.5},` +
			`{"rule":"b","endpoint":"10.0.0.1:8000","rank":0,"source":"zmq","blocks":0,"connected":false,"trusted":false,"untrusted_reason":"no_events"}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := store.Open(store.Options{StateDir: t.TempDir(), Log: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			opts := api.DefaultOptions()
			opts.Store, opts.KV, opts.Log = rs, tc.src, quietLog()
			opts.Metrics = &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
			srv, err := api.NewServer(opts)
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()
			resp, err := ts.Client().Get(ts.URL + api.BasePath + "/config/ai/kv/inventory")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got json.RawMessage
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || string(got) != tc.want {
				t.Fatalf("status %d body\n%s\nwant\n%s", resp.StatusCode, got, tc.want)
			}
		})
	}
}
