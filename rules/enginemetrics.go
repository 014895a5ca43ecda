package rules

import (
	"fmt"
	"strings"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/spec"
)

// engine_metrics_path: where the gateway scrapes the engines' own load.
const (
	fieldEngineMetricsPath = "engine_metrics_path"
	fieldEngineLoad        = "engineLoad" // endpoint, output only (GET)
	// EngineMetricsOff turns scraping off for a rule.
	EngineMetricsOff        = "none"
	maxEngineMetricsPathLen = 256
)

// checkEngineMetricsPath validates engine_metrics_path: "", "none", or an
// absolute path without query, fragment, spaces or dot segments.
func checkEngineMetricsPath(r *Rule) *apierror.Error {
	p := r.ServiceArguments.EngineMetricsPath
	if p == "" || p == EngineMetricsOff {
		return nil
	}
	why := ""
	switch {
	case p[0] != '/':
		why = `must start with / (or be "none")`
	case len(p) > maxEngineMetricsPathLen:
		why = fmt.Sprintf("is longer than %d bytes", maxEngineMetricsPathLen)
	case strings.ContainsAny(p, "?#% \t\r\n"):
		why = "may not hold a query, fragment, escape or space"
	case strings.Contains(p+"/", "/./") || strings.Contains(p+"/", "/../"):
		why = "must not hold dot segments"
	}
	if why == "" {
		return nil
	}
	msg := fmt.Sprintf("engine_metrics_path %q %s", p, why)
	return invalidField(saPath(fieldEngineMetricsPath), msg, msg)
}

// compileEngineMetricsPath resolves the path the datapath scrapes: the
// engine's default when empty, "" (not scraped) for "none".
func compileEngineMetricsPath(p string, eng spec.Engine) string {
	switch p {
	case EngineMetricsOff:
		return ""
	case "":
		return enginestats.DialectFor(string(eng)).Path
	}
	return p
}
