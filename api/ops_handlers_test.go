package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/buildinfo"
	"github.com/infergate/infergate/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// TestVersion: GET /version (and under the base path) answers this build's
// facts, the ones infergate_build_info carries.
func TestVersion(t *testing.T) {
	h := newHarness(t, true, nil)
	for _, path := range []string{"/version", "/netlox/v1/version"} {
		r := h.do(t, http.MethodGet, path, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		var got map[string]string
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatalf("%s: %v (%s)", path, err, r.body)
		}
		bi := buildinfo.Get()
		want := map[string]string{"version": bi.Version, "commit": bi.Commit, "go": bi.Go}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s = %v, want %v", path, got, want)
		}
	}
}

type fakeReplicas struct {
	list api.ReplicaList
	err  error
}

func (f fakeReplicas) Replicas(context.Context) (api.ReplicaList, error) { return f.list, f.err }

// serveReplicas serves the API over a harness's store with src as the
// replica source.
func serveReplicas(t *testing.T, src api.ReplicaSource) *harness {
	t.Helper()
	base := newHarness(t, true, nil)
	reg := prometheus.NewRegistry()
	opts := api.DefaultOptions()
	opts.Store, opts.Log, opts.Replicas = base.store, quietLog(), src
	opts.Metrics = &metrics.Metrics{Registry: reg, API: metrics.NewAPI(reg)}
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &harness{srv: srv, ts: ts}
}

func TestReplicas(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	two := api.ReplicaList{Revision: 42, Replicas: []api.ReplicaView{
		{ID: "a", API: "10.0.0.1:11111", Revision: 42, Rules: 2, Digest: "d1", Updated: at},
		{ID: "b", API: "10.0.0.2:11111", Revision: 41, Rules: 2, Digest: "d1", Updated: at}}}
	tests := []struct {
		name   string
		src    api.ReplicaSource
		status int
		code   string
		want   api.ReplicaList
	}{
		{"not shared", nil, http.StatusNotImplemented, api.CodeNoSharedStore, api.ReplicaList{}},
		{"store down", fakeReplicas{err: errors.New("context deadline exceeded")}, http.StatusServiceUnavailable, "store_unavailable", api.ReplicaList{}},
		{"two replicas", fakeReplicas{list: two}, http.StatusOK, "", two},
		{"none live", fakeReplicas{list: api.ReplicaList{Revision: 7}}, http.StatusOK, "", api.ReplicaList{Revision: 7, Replicas: []api.ReplicaView{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := serveReplicas(t, tc.src)
			r := h.do(t, http.MethodGet, "/netlox/v1/replicas", nil)
			if tc.code != "" {
				checkError(t, r, tc.status, tc.code, "")
				return
			}
			var got api.ReplicaList
			if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
