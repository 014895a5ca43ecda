package testtool

import (
	"runtime"
	"testing"
)

// TestRequireFindsProgram: a program on PATH is returned whatever CI says.
func TestRequireFindsProgram(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		if p := Require(t, "sh", "dash"); p == "" {
			t.Fatalf("CI=%q: no path for sh", ci)
		}
	}
}

// TestMissingFailsInCI: in CI a missing program fails the test instead of
// skipping it; elsewhere it skips.
func TestMissingFailsInCI(t *testing.T) {
	tests := []struct {
		ci                   string
		wantFailed, wantSkip bool
	}{
		{"true", true, false},
		{"", false, true},
	}
	for _, tt := range tests {
		t.Setenv("CI", tt.ci)
		rec := &recorder{TB: t}
		done := make(chan struct{})
		go func() { // Fatalf/Skipf end the goroutine, as in a real test
			defer close(done)
			Require(rec, "no-such-program-infergate", "none")
		}()
		<-done
		if rec.failed != tt.wantFailed || rec.skipped != tt.wantSkip {
			t.Errorf("CI=%q: failed=%v skipped=%v, want %v %v", tt.ci, rec.failed, rec.skipped, tt.wantFailed, tt.wantSkip)
		}
	}
}

// recorder notes Fatalf and Skipf instead of ending the real test.
type recorder struct {
	testing.TB
	failed, skipped bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(string, ...any) {
	r.failed = true
	runtime.Goexit()
}

func (r *recorder) Skipf(string, ...any) {
	r.skipped = true
	runtime.Goexit()
}
