package main

import "testing"

func TestCutRule(t *testing.T) {
	// A window [2, 5) s; a ramp step judges 10 requests at most (a p90
	// within the SLO allows one late request of 10).
	window := cutRule{From: 2, Until: 5}
	ramp := cutRule{From: 2, Until: 5, SLO: 2, MaxIn: 10}
	for _, c := range []struct {
		name string
		rule cutRule
		now  float64
		reqs []reqProgress
		want bool
	}{
		{"no rule", cutRule{}, 9, nil, false},
		{"window not over", window, 4.9, []reqProgress{{3, 0.1, 4}}, false},
		{"window over, its requests done", window, 5.1, []reqProgress{{3, 0.1, 4}, {4.5, 0.2, 5}}, true},
		{"window over, one still streaming", window, 5.1, []reqProgress{{3, 0.1, 4}, {4.5, 0.2, -1}}, false},
		{"warm-up and later requests do not count", window, 5.1, []reqProgress{{1, 0.1, -1}, {3, 0.1, 4}, {5.2, -1, -1}}, true},
		{"ramp: one late of 10 may still pass", ramp, 4.8, []reqProgress{{2.1, -1, -1}, {2.5, 0.3, -1}}, false},
		{"ramp: two late of 10 fail", ramp, 4.8, []reqProgress{{2.1, -1, -1}, {2.2, 2.5, -1}}, true},
		{"ramp: a request that ended without a token after the SLO is late", ramp, 4.8, []reqProgress{{2.1, -1, 4.5}, {2.2, -1, -1}}, true},
		{"ramp: one that failed fast is not", ramp, 4.8, []reqProgress{{2.1, -1, 2.2}, {2.2, -1, -1}}, false},
		// Requests that started before the window are among MaxIn but
		// cannot be in it: with 8 in the window at most, one late fails.
		{"ramp: the warm-up's requests lower the bound", ramp, 4.8, []reqProgress{{0.5, 0.1, 1}, {1, 0.1, 2}, {2.1, -1, -1}}, true},
		{"ramp: 20 at most, 2 late may pass", cutRule{From: 2, Until: 5, SLO: 2, MaxIn: 20}, 4.8, []reqProgress{{2.1, -1, -1}, {2.2, 3, 4}}, false},
	} {
		if got := c.rule.done(c.now, c.reqs); got != c.want {
			t.Errorf("%s: done %v, want %v", c.name, got, c.want)
		}
	}
}
