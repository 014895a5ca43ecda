package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/tenant"
)

// problemKeys is a key store whose shared document is unreadable.
type problemKeys struct {
	*tenant.Registry
	problem string
}

func (k problemKeys) SharedProblem() string { return k.problem }

// TestReadyzReportsKeyStoreProblem: a replica serving without its shared key
// document (garbage in etcd) stays ready (200) but says it is degraded and
// why; with the document readable it is plainly ready.
func TestReadyzReportsKeyStoreProblem(t *testing.T) {
	cases := []struct {
		name, problem, status string
		reasons               int
	}{
		{"readable", "", "ready", 0},
		{"unreadable", "parse key store: invalid character 'g'; serving the last good keys", "degraded: API-key store unreadable", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := store.Open(store.Options{StateDir: t.TempDir(), Log: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			if err := rs.Replay(context.Background()); err != nil {
				t.Fatal(err)
			}
			reg, err := tenant.Open(tenant.Options{Log: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			opts := api.DefaultOptions()
			opts.Store, opts.Keys = rs, problemKeys{reg, tc.problem}
			h := serveOptions(t, opts)
			r := h.do(t, http.MethodGet, "/readyz", nil)
			var got struct {
				Status  string   `json:"status"`
				Reasons []string `json:"reasons"`
			}
			if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusOK {
				t.Fatalf("readyz = %d %s (%v)", r.status, r.body, err)
			}
			if got.Status != tc.status || len(got.Reasons) != tc.reasons {
				t.Fatalf("readyz = %+v, want status %q with %d reasons", got, tc.status, tc.reasons)
			}
			if tc.reasons > 0 && got.Reasons[0] != "API-key store: "+tc.problem {
				t.Fatalf("reason %q does not carry the store's %q", got.Reasons[0], tc.problem)
			}
		})
	}
}
