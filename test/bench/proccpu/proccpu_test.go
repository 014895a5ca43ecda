package proccpu

import (
	"os"
	"testing"
	"time"
)

// TestOfReadsSelf: after this process has used 50 ms of CPU (by Self, its
// own rusage: a wall-clock spin on a loaded machine may get less than one
// /proc tick), /proc reports some, and no more than Self reads then plus
// a tick each for user and system time.
func TestOfReadsSelf(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for Self() < 50*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("the test process got no 50 ms of CPU in 10 s")
		}
	}
	d, err := Of(os.Getpid())
	if err != nil || d <= 0 {
		t.Errorf("Of(self) = %v, %v", d, err)
	}
	if s := Self(); d > s+2*time.Second/userHZ {
		t.Errorf("Of(self) = %v, beyond Self's %v by more than two ticks", d, s)
	}
}

func TestOfNoProcess(t *testing.T) {
	for _, pid := range []int{0, -1} {
		if _, err := Of(pid); err == nil {
			t.Errorf("Of(%d) = nil error", pid)
		}
	}
}
