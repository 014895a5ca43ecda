package proccpu

import (
	"os"
	"testing"
	"time"
)

func TestOfReadsSelf(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	d, err := Of(os.Getpid())
	if err != nil || d <= 0 {
		t.Errorf("Of(self) = %v, %v", d, err)
	}
}

func TestOfNoProcess(t *testing.T) {
	for _, pid := range []int{0, -1} {
		if _, err := Of(pid); err == nil {
			t.Errorf("Of(%d) = nil error", pid)
		}
	}
}
