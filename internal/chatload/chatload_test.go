package chatload

import (
	"encoding/json"
	"testing"
)

func TestBody(t *testing.T) {
	prompts := SystemPrompts(3, 2048)
	for i, p := range prompts {
		if len(p) < 2048*7/8 || len(p) > 2048 {
			t.Errorf("prompt %d: %d bytes, want about 7/8 of 2048", i, len(p))
		}
		for j := range i {
			if prompts[j] == p {
				t.Errorf("prompts %d and %d are equal", j, i)
			}
		}
	}
	for _, size := range []int{100, 4096} {
		b := Body("m", prompts[1], 7, size)
		var req struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct{ Role, Content string }
		}
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatalf("size %d: %v: %s", size, err, b)
		}
		if req.Model != "m" || !req.Stream || len(req.Messages) != 2 || req.Messages[0].Content != prompts[1] || req.Messages[1].Role != "user" {
			t.Errorf("size %d: %+v", size, req)
		}
		if size > 4000 && len(b) != size {
			t.Errorf("padded body is %d bytes, want %d", len(b), size)
		}
	}
}
