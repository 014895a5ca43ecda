package pd_test

import (
	"slices"
	"testing"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/spec"
)

// TestDialectSplit: which generation APIs each engine's transfer covers,
// and who serves the rest whole.
func TestDialectSplit(t *testing.T) {
	seq := pd.Split{Sequence: true}
	decode := pd.Split{Role: spec.RoleDecode}
	role0Only := pd.Split{Role: spec.RoleAny, Strict: true}
	for _, tc := range []struct {
		engine spec.Engine
		path   string
		want   pd.Split
	}{
		{spec.EngineVLLM, "/v1/completions", seq},
		{spec.EngineVLLM, "/v1/chat/completions", seq},
		{spec.EngineVLLM, "/v1/responses", seq},
		{spec.EngineVLLM, "/v1/messages", decode},
		{spec.EngineSGLang, "/v1/completions", seq},
		{spec.EngineSGLang, "/v1/chat/completions", seq},
		{spec.EngineSGLang, "/v1/responses", seq},
		{spec.EngineSGLang, "/v1/messages", role0Only},
		{spec.EngineTRTLLM, "/v1/completions", seq},
		{spec.EngineTRTLLM, "/v1/chat/completions", seq},
		{spec.EngineTRTLLM, "/v1/responses", decode},
		{spec.EngineTRTLLM, "/v1/messages", decode},
	} {
		if got := mustDialect(t, tc.engine).Split(tc.path); got != tc.want {
			t.Errorf("%s Split(%s) = %+v, want %+v", tc.engine, tc.path, got, tc.want)
		}
	}
}

// TestDialectTransferFields: each engine names its own transfer state.
func TestDialectTransferFields(t *testing.T) {
	for _, tc := range []struct {
		engine spec.Engine
		want   []string
	}{
		{spec.EngineVLLM, []string{"kv_transfer_params"}},
		{spec.EngineSGLang, []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"}},
		{spec.EngineTRTLLM, []string{"disaggregated_params"}},
	} {
		if got := mustDialect(t, tc.engine).TransferFields(); !slices.Equal(got, tc.want) {
			t.Errorf("%s TransferFields() = %q, want %q", tc.engine, got, tc.want)
		}
	}
}
