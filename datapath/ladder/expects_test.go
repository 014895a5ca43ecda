package ladder

import "testing"

func TestExpectsNewBlocks(t *testing.T) {
	tests := []struct {
		name          string
		blocks, held  int
		wantPublishes bool
	}{
		{"miss", 4, 0, true},
		{"partial hit beyond the cached prefix", 4, 2, true},
		{"full hit", 4, 4, false},
		{"held more than asked (longer cached prompt)", 2, 5, false},
		{"no full block", 0, 0, false},
	}
	for _, tt := range tests {
		if got := ExpectsNewBlocks(tt.blocks, tt.held); got != tt.wantPublishes {
			t.Errorf("%s: ExpectsNewBlocks(%d, %d) = %v", tt.name, tt.blocks, tt.held, got)
		}
	}
}
