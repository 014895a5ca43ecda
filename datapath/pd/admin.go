package pd

import (
	"slices"

	"github.com/infergate/infergate/spec"
)

// Admin paths: every engine serves operator APIs (sleep, cache flush,
// weight reload, LoRA load, profiling) on the same port as inference, with
// no authentication of their own by default. A gateway that forwards every
// path would hand them to any client, so each engine's file declares its
// list and the datapath closes them unless a rule opens them. An entry is
// an exact path or "prefix/*" (the prefix and everything below it), the
// allowed_paths syntax.

// adminPaths is the one registry of admin paths, keyed by kvEngineType.
// Read-only.
var adminPaths = map[spec.Engine][]string{
	spec.EngineVLLM:     vllmAdminPaths,
	spec.EngineSGLang:   sglangAdminPaths,
	spec.EngineTRTLLM:   trtAdminPaths,
	spec.EngineLlamaCpp: llamacppAdminPaths,
}

// AdminPaths returns the admin paths of engine, sorted, in a new slice. An
// engine that is not known ("" when the rule did not say) gets the union of
// every known engine's: an unnamed engine may be any of them.
func AdminPaths(engine spec.Engine) []string {
	if l, ok := adminPaths[engine]; ok {
		out := slices.Clone(l)
		slices.Sort(out)
		return slices.Compact(out)
	}
	var out []string
	for _, l := range adminPaths {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
