package daemon

import (
	"testing"

	"github.com/infergate/infergate/radix"
)

func TestPrefixIndexOptions(t *testing.T) {
	tests := []struct {
		name       string
		budget     int64
		keyMax     int
		wantBudget int64
		wantKeyMax int
	}{
		{"defaults", DefaultOptions().PrefixIndexBudgetBytes, DefaultOptions().PrefixKeyMaxBytes, 64 << 20, 256 << 10},
		{"zero keeps radix defaults", 0, 0, radix.DefaultBudgetBytes, radix.DefaultMaxKeyBytes},
		{"overrides", 1 << 20, 4096, 1 << 20, 4096},
	}
	for _, tt := range tests {
		o := DefaultOptions()
		o.PrefixIndexBudgetBytes, o.PrefixKeyMaxBytes = tt.budget, tt.keyMax
		got := o.PrefixIndexOptions()
		if got.BudgetBytes != tt.wantBudget || got.MaxKeyBytes != tt.wantKeyMax {
			t.Errorf("%s: budget %d key %d, want %d %d", tt.name, got.BudgetBytes, got.MaxKeyBytes, tt.wantBudget, tt.wantKeyMax)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}
