package tenant

import (
	"context"
	"errors"
	"testing"

	"github.com/infergate/infergate/apierror"
)

func TestDecodeKeyDocument(t *testing.T) {
	m, err := Mint()
	if err != nil {
		t.Fatal(err)
	}
	base := `"tenant_id":"t","name":"n","key_id":"` + m.ID + `","key_hash":"` + m.Hash.String() + `"`
	cases := []struct {
		name, spec, code, field string
	}{
		{"import", `{` + base + `,"rate_limit_rps":2,"burst_size":4}`, "", ""},
		{"raw_key", `{` + base + `,"raw_key":"lxb_x"}`, CodeSecretInFile, "spec.raw_key"},
		{"key", `{"tenant_id":"t","name":"n","key":"lxb_x"}`, CodeSecretInFile, "spec.key"},
		{"unknown field", `{` + base + `,"rps":2}`, apierror.CodeUnknownField, "spec.rps"},
		{"wrong type", `{` + base + `,"rate_limit_rps":"2"}`, apierror.CodeMalformedJSON, "spec.rate_limit_rps"},
		{"zero limit", `{` + base + `,"tokens_per_min":0}`, apierror.CodeInvalidField, "spec.tokens_per_min"},
		{"no hash", `{"tenant_id":"t","name":"n"}`, apierror.CodeInvalidCombo, "spec.key_id"},
		{"bad hash", `{"tenant_id":"t","name":"n","key_id":"` + m.ID + `","key_hash":"x"}`, apierror.CodeInvalidField, "spec.key_hash"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeKeyDocument([]byte(c.spec))
			if c.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			e, ok := apierror.As(err)
			if !ok || e.Code != c.code || e.Field != c.field {
				t.Fatalf("err = %v, want %s at %s", err, c.code, c.field)
			}
		})
	}
}

// TestApplyKeyLocal: the declarative outcomes against a real registry.
func TestApplyKeyLocal(t *testing.T) {
	r, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := Mint()
	ip := func(v int) *int { return &v }
	spec := KeySpec{TenantID: "t", Name: "n", KeyID: m.ID, KeyHash: m.Hash.String(), RateLimitRPS: ip(3)}
	ctx := context.Background()
	steps := []struct {
		name string
		edit func(*KeySpec)
		want Outcome
		code string
	}{
		{"create", func(*KeySpec) {}, OutcomeCreated, ""},
		{"same", func(*KeySpec) {}, OutcomeUnchanged, ""},
		{"models set", func(s *KeySpec) { s.AllowedModels = []string{"b", "a"} }, OutcomeUpdated, ""},
		{"models reordered is no change", func(s *KeySpec) { s.AllowedModels = []string{"a", "b"} }, OutcomeUnchanged, ""},
		{"burst", func(s *KeySpec) { s.BurstSize = ip(6) }, OutcomeUpdated, ""},
		{"burst back to its default", func(s *KeySpec) { s.BurstSize = nil }, OutcomeUpdated, ""},
		{"drop rps", func(s *KeySpec) { s.RateLimitRPS = nil }, "", apierror.CodeInvalidCombo},
		{"rename", func(s *KeySpec) { s.RateLimitRPS = ip(3); s.Name = "other" }, "", CodeKeyConflict},
	}
	for _, st := range steps {
		st.edit(&spec)
		got, err := ApplyKey(ctx, r.Local(), spec)
		if st.code != "" {
			if e, ok := apierror.As(err); !ok || e.Code != st.code {
				t.Fatalf("%s: err = %v, want %s", st.name, err, st.code)
			}
			continue
		}
		if err != nil || got != st.want {
			t.Fatalf("%s: %q %v, want %q", st.name, got, err, st.want)
		}
	}
	if _, err := r.Create(KeySpec{TenantID: "t", Name: "n", KeyID: m.ID, KeyHash: m.Hash.String()}); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("re-import: %v, want ErrKeyExists", err)
	}
	tl := TenantLimit{TenantID: "t", RPS: ip(5)}
	for i, want := range []Outcome{OutcomeCreated, OutcomeUnchanged} {
		if got, err := ApplyTenantLimit(ctx, r.Local(), tl); err != nil || got != want {
			t.Fatalf("tenant limit apply %d: %q %v", i, got, err)
		}
	}
	tl.RPS = ip(6)
	if got, _ := ApplyTenantLimit(ctx, r.Local(), tl); got != OutcomeUpdated {
		t.Fatalf("tenant limit change: %q", got)
	}
	if err := r.DeleteTenantLimit("t"); err != nil || len(r.TenantLimits("t")) != 0 {
		t.Fatalf("delete tenant limit: %v", err)
	}
}
