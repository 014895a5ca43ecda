package datapath

import (
	"testing"

	"github.com/infergate/infergate/internal/testport"
)

// freePort is a port free on every address and outside the kernel's
// ephemeral range (testport.Free).
func freePort(t testing.TB) uint16 {
	t.Helper()
	return uint16(testport.Free(t))
}
