package flow

import "testing"

func TestParseClass(t *testing.T) {
	tests := []struct {
		in   string
		want Class
		ok   bool
	}{
		{"high", ClassHigh, true},
		{" CRITICAL ", ClassHigh, true},
		{"2", ClassHigh, true},
		{"standard", ClassStandard, true},
		{"default", ClassStandard, true},
		{"low", ClassLow, true},
		{"Sheddable", ClassLow, true},
		{"0", ClassLow, true},
		{"", DefaultClass, false},
		{"urgent", DefaultClass, false},
		{"3", DefaultClass, false},
		{"-1", DefaultClass, false},
	}
	for _, tc := range tests {
		if got, ok := ParseClass(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("ParseClass(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestGrant(t *testing.T) {
	tests := []struct {
		name    string
		asked   Class
		ok      bool
		ceiling Class
		want    Class
	}{
		{"within the grant", ClassLow, true, ClassHigh, ClassLow},
		{"above the grant: clamped", ClassHigh, true, ClassStandard, ClassStandard},
		{"unknown: default", ClassHigh, false, ClassHigh, DefaultClass},
		{"unknown under a low grant: the grant", ClassHigh, false, ClassLow, ClassLow},
		{"exactly the grant", ClassHigh, true, ClassHigh, ClassHigh},
	}
	for _, tc := range tests {
		if got := Grant(tc.asked, tc.ok, tc.ceiling); got != tc.want {
			t.Errorf("%s: Grant = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestOptionsCheck(t *testing.T) {
	bad := []func(*Options){
		func(o *Options) { o.UnkeyedCeiling = "urgent" },
		func(o *Options) { o.KeyCeiling = "" },
		func(o *Options) { o.MinShare = 0.9 },
		func(o *Options) { o.MinShare = -0.1 },
	}
	d := DefaultOptions()
	if err := d.Check(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for i, f := range bad {
		o := DefaultOptions()
		f(&o)
		if o.Check() == nil {
			t.Errorf("case %d accepted", i)
		}
	}
}
