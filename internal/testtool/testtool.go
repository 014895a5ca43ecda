// Package testtool finds the programs a test drives (promtool, unshare,
// chromium, …). Outside CI a missing program skips the test, so a
// developer without it can still run the suite; in CI (CI=true, set by
// .ci/run, which installs every such program) it fails the test, so CI
// never passes by skipping.
package testtool

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the suite runs in CI, where nothing may be skipped
// for a missing program.
func InCI() bool { return os.Getenv("CI") == "true" }

// Require returns the path of program, or skips (outside CI) or fails (in
// CI) the test; pkg names the Debian package that provides it.
func Require(t testing.TB, program, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err != nil {
		Missing(t, "%s not installed (Debian package %s): %v", program, pkg, err)
	}
	return path
}

// Missing ends the test for a missing prerequisite: a failure in CI, a
// skip elsewhere.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("required in CI: "+format, args...)
	}
	t.Skipf(format, args...)
}
