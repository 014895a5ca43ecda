package metrics

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/internal/testtool"
)

// alertTestsPath holds promtool unit tests of the alert rules (series in,
// alerts out), beside the rules they test.
const alertTestsPath = "../configs/observability/alerts_test.yml"

// TestAlertRulesPromtool: promtool accepts the shipped alert rules and
// their unit tests pass (each alert fires on the series it is meant for,
// after its "for", and not on healthy ones). Without promtool: skipped,
// or failed in CI (.ci/ensure-packages test installs it).
func TestAlertRulesPromtool(t *testing.T) {
	promtool := testtool.Require(t, "promtool", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(alertsPath)},
		{"test", "rules", filepath.Base(alertTestsPath)},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Dir(alertsPath) // the tests name the rules file relative to themselves
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
