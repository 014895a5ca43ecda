package proccpu

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestOfReadsSelf: after this process has used 50 ms of CPU (by its own
// rusage: a wall-clock spin on a loaded machine may get less than one
// /proc tick), /proc reports some.
func TestOfReadsSelf(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for selfCPU(t) < 50*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("the test process got no 50 ms of CPU in 10 s")
		}
	}
	d, err := Of(os.Getpid())
	if err != nil || d <= 0 {
		t.Errorf("Of(self) = %v, %v", d, err)
	}
}

func selfCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestOfNoProcess(t *testing.T) {
	for _, pid := range []int{0, -1} {
		if _, err := Of(pid); err == nil {
			t.Errorf("Of(%d) = nil error", pid)
		}
	}
}
