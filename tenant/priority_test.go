package tenant

import (
	"net/http"
	"testing"

	"github.com/infergate/infergate/apierror"
)

// TestMaxPriority: a key's max_priority is validated, kept in its
// canonical spelling, persisted, patched and handed to the datapath with
// the admission.
func TestMaxPriority(t *testing.T) {
	dir := t.TempDir()
	r, _ := newTestRegistry(t, dir)
	tests := []struct {
		name, in, want string
		bad            bool
	}{
		{"none: the gateway's grant", "", "", false},
		{"canonical", "high", "high", false},
		{"alias and case", " Sheddable", "low", false},
		{"number", "1", "standard", false},
		{"unknown class", "urgent", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := r.Create(KeySpec{TenantID: "t", Name: tc.name, MaxPriority: tc.in})
			if tc.bad {
				e, ok := apierror.As(err)
				if !ok || e.Status != http.StatusBadRequest || e.Field != FieldMaxPriority {
					t.Fatalf("got %v, want 400 at %s", err, FieldMaxPriority)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.MaxPriority != tc.want {
				t.Fatalf("view %q, want %q", c.MaxPriority, tc.want)
			}
			adm, d := r.Admit(Check{Key: c.RawKey, ClientIP: "127.0.0.1"})
			if d != nil {
				t.Fatal(d.Message)
			}
			if adm.MaxPriority() != tc.want {
				t.Fatalf("admission grants %q, want %q", adm.MaxPriority(), tc.want)
			}
		})
	}
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "patched"})
	high, bad, none := "HIGH", "top", ""
	if v, err := r.Patch(k.KeyID, KeyPatch{MaxPriority: &high}); err != nil || v.MaxPriority != "high" {
		t.Fatalf("patch to high: %+v %v", v, err)
	}
	if _, err := r.Patch(k.KeyID, KeyPatch{MaxPriority: &bad}); err == nil {
		t.Fatal("patch to an unknown class accepted")
	}
	r2, _ := newTestRegistry(t, dir) // persisted
	if v, err := r2.Get(k.KeyID); err != nil || v.MaxPriority != "high" {
		t.Fatalf("after reopen: %+v %v", v, err)
	}
	if v, err := r.Patch(k.KeyID, KeyPatch{MaxPriority: &none}); err != nil || v.MaxPriority != "" {
		t.Fatalf("patch back to the default grant: %+v %v", v, err)
	}
	if p, changed, err := keyDiff(KeySpec{MaxPriority: "low"}, KeyView{MaxPriority: "high"}); err != nil || !changed || p.MaxPriority == nil || *p.MaxPriority != "low" {
		t.Fatalf("keyDiff: %+v %v %v", p, changed, err)
	}
}
