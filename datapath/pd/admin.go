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

// sealedPaths are the admin paths no rule setting opens (allow_admin_paths,
// allowed_paths): destructive reads another reader depends on. Read-only.
var sealedPaths = map[spec.Engine][]string{
	spec.EngineTRTLLM: trtSealedPaths,
}

// AdminPaths returns the admin paths of engine, sorted, in a new slice. An
// engine that is not known ("" when the rule did not say) gets the union of
// every known engine's: an unnamed engine may be any of them.
func AdminPaths(engine spec.Engine) []string { return pathsOf(adminPaths, engine) }

// SealedAdminPaths returns the admin paths of engine that stay closed
// whatever the rule opens, as AdminPaths does (an unknown engine gets every
// engine's).
func SealedAdminPaths(engine spec.Engine) []string { return pathsOf(sealedPaths, engine) }

// pathsOf is engine's paths in reg, sorted and deduplicated in a new slice.
// Whether engine is known is asked of adminPaths, the registry of every
// engine: a known engine with no entry in reg has none, and an unknown one
// gets the union of reg.
func pathsOf(reg map[spec.Engine][]string, engine spec.Engine) []string {
	if _, known := adminPaths[engine]; known {
		out := slices.Clone(reg[engine])
		slices.Sort(out)
		return slices.Compact(out)
	}
	var out []string
	for _, l := range reg {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
