package tenant

import (
	"testing"
	"time"
)

// TestSetShare: with a share of n, a burst at a frozen clock admits 1/n of
// a key's and a tenant's ceilings; raising the share back gives the rest.
func TestSetShare(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	iv := func(v int) *int { return &v }
	cases := []struct {
		name         string
		keyRPS       int
		tenantRPS    int
		share        int
		wantAdmitted int
	}{
		{"key alone, one replica", 30, 0, 1, 30},
		{"key alone, three replicas", 30, 0, 3, 10},
		{"tenant is the tighter, three replicas", 30, 12, 3, 4},
		{"share below one is one", 30, 0, 0, 30},
		{"a tiny share still admits one", 2, 0, 5, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Open(Options{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			r.SetShare(c.share)
			m, _ := Mint()
			if _, err := r.Create(KeySpec{TenantID: "t", Name: "n", KeyID: m.ID, KeyHash: m.Hash.String(), RateLimitRPS: iv(c.keyRPS)}); err != nil {
				t.Fatal(err)
			}
			if c.tenantRPS > 0 {
				if _, err := r.SetTenantLimit(TenantLimit{TenantID: "t", RPS: iv(c.tenantRPS)}); err != nil {
					t.Fatal(err)
				}
			}
			admitted := 0
			for range 100 {
				if a, d := r.Admit(Check{Key: m.Raw.Reveal()}); d == nil {
					admitted++
					a.Settle(0, 0, true)
				}
			}
			if admitted != c.wantAdmitted {
				t.Fatalf("admitted %d of 100 at a frozen clock, want %d", admitted, c.wantAdmitted)
			}
		})
	}
	// Back to one replica: what was spent stays spent.
	r, _ := Open(Options{Now: func() time.Time { return now }})
	m, _ := Mint()
	if _, err := r.Create(KeySpec{TenantID: "t", Name: "n", KeyID: m.ID, KeyHash: m.Hash.String(), RateLimitRPS: iv(30)}); err != nil {
		t.Fatal(err)
	}
	r.SetShare(3)
	n := 0
	for range 20 {
		if _, d := r.Admit(Check{Key: m.Raw.Reveal()}); d == nil {
			n++
		}
	}
	r.SetShare(1)
	for range 40 {
		if _, d := r.Admit(Check{Key: m.Raw.Reveal()}); d == nil {
			n++
		}
	}
	if n != 30 || r.Share() != 1 {
		t.Fatalf("admitted %d over share 3 then 1, want 30 (the full burst once)", n)
	}
}
