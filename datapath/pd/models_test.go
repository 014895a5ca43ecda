package pd

import (
	"fmt"
	"sync"
	"testing"
)

func TestModelLabels(t *testing.T) {
	type call struct {
		model  string
		served bool
		want   string
	}
	tests := []struct {
		name   string
		pinned string
		max    int
		calls  []call
	}{
		{"pinned rule labels its model", "llama", 2, []call{{"llama", true, "llama"}, {"", false, "llama"}}},
		{"served model becomes known", "", 2, []call{{"qwen", false, ModelOther}, {"qwen", true, "qwen"}, {"qwen", false, "qwen"}}},
		{"empty model is other", "", 2, []call{{"", true, ModelOther}}},
		{"cap bounds cardinality", "", 2, []call{{"a", true, "a"}, {"b", true, "b"}, {"c", true, ModelOther}, {"a", false, "a"}}},
		{"a name of a known one's length is not it", "", 4, []call{{"qwen-7b", true, "qwen-7b"}, {"qwen-8b", false, ModelOther}, {"qwen-7", false, ModelOther}, {"qwen-7b", false, "qwen-7b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewModelLabels(tt.pinned, tt.max)
			for i, c := range tt.calls {
				if got := l.Label(c.model, c.served); got != c.want {
					t.Errorf("call %d Label(%q, %v) = %q, want %q", i, c.model, c.served, got, c.want)
				}
			}
		})
	}
}

func TestModelLabelsInventedNamesStayBounded(t *testing.T) {
	l := NewModelLabels("", 4)
	seen := map[string]bool{}
	for i := range 1000 {
		seen[l.Label(fmt.Sprintf("m%d", i), true)] = true
	}
	if len(seen) != 5 { // 4 learned + other
		t.Fatalf("%d distinct labels, want 5", len(seen))
	}
}

// TestModelLabelsConcurrentLearning races requests learning and reading
// models: the cap holds, and every model learned answers as itself after.
func TestModelLabelsConcurrentLearning(t *testing.T) {
	const max, workers, names = 6, 8, 20
	l := NewModelLabels("", max)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				l.Label(fmt.Sprintf("m%d", (i+w)%names), i%3 != 0)
			}
		}()
	}
	wg.Wait()
	learned := 0
	for i := range names {
		m := fmt.Sprintf("m%d", i)
		if l.Label(m, false) == m {
			learned++
		}
	}
	if learned != max {
		t.Fatalf("%d models answer as themselves, want the cap %d", learned, max)
	}
}

// BenchmarkModelLabelsKnown is the per-request call: a rule's one known
// model, labelled as itself.
func BenchmarkModelLabelsKnown(b *testing.B) {
	l := NewModelLabels("", 0)
	for _, m := range []string{"meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"} {
		l.Label(m, true)
	}
	model := "Qwen/Qwen2.5-7B-Instruct"
	for b.Loop() {
		if l.Label(model, false) != model {
			b.Fatal("known model not labelled as itself")
		}
	}
}
