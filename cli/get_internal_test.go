package cli

import (
	"testing"

	"github.com/infergate/infergate/rules"
)

func TestEngineCell(t *testing.T) {
	tests := []struct {
		name string
		sa   rules.ServiceArguments
		want string
	}{
		{"plain pool, no engine", rules.ServiceArguments{}, "-"},
		{"P/D defaults to vllm", rules.ServiceArguments{PDDisaggMode: true}, "vllm"},
		{"KV-exact single pool defaults to vllm", rules.ServiceArguments{KVExactMode: 3}, "vllm"},
		{"explicit engine", rules.ServiceArguments{PDDisaggMode: true, KVEngineType: "sglang"}, "sglang"},
		{"explicit engine on a plain pool", rules.ServiceArguments{KVEngineType: "llamacpp"}, "llamacpp"},
	}
	for _, tt := range tests {
		if got := engineCell(tt.sa); got != tt.want {
			t.Errorf("%s: engineCell = %q, want %q", tt.name, got, tt.want)
		}
	}
}
