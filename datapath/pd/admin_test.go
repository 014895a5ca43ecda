package pd

import (
	"slices"
	"testing"

	"github.com/infergate/infergate/spec"
)

// TestAdminPaths: each engine's list holds the operator APIs its server
// exposes on the inference port; an engine not named gets all of them.
func TestAdminPaths(t *testing.T) {
	want := map[spec.Engine][]string{
		spec.EngineVLLM: {"/sleep", "/wake_up", "/collective_rpc", "/reset_prefix_cache", "/start_profile",
			"/stop_profile", "/scale_elastic_ep", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"},
		spec.EngineSGLang:   {"/flush_cache", "/update_weights_from_disk", "/shutdown", "/release_memory_occupation"},
		spec.EngineTRTLLM:   {"/kv_cache_events"},
		spec.EngineLlamaCpp: {"/slots", "/slots/*"},
	}
	union := AdminPaths("")
	for e, paths := range want {
		got := AdminPaths(e)
		for _, p := range paths {
			if !slices.Contains(got, p) {
				t.Errorf("AdminPaths(%s) lacks %s", e, p)
			}
			if !slices.Contains(union, p) {
				t.Errorf("AdminPaths(\"\") lacks %s (%s)", p, e)
			}
		}
		for _, p := range got {
			if p == "" || p[0] != '/' {
				t.Errorf("AdminPaths(%s) entry %q is not an absolute path", e, p)
			}
		}
	}
	if got := AdminPaths("future-engine"); !slices.Equal(got, union) {
		t.Errorf("an unknown engine gets %v, want the union", got)
	}
	for _, generation := range []string{"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/generate"} {
		if slices.Contains(union, generation) {
			t.Errorf("%s is an admin path", generation)
		}
	}
}
