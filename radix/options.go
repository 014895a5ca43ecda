package radix

import "fmt"

// Defaults for Options. The chunk size trades match granularity against
// memory: every stored key costs one entry per ChunkBytes of key.
const (
	DefaultChunkBytes  = 128
	DefaultSteps       = 8
	DefaultMaxKeyBytes = 256 << 10
	DefaultBudgetBytes = 64 << 20

	minChunkBytes = 16
	maxChunkBytes = 64 << 10
)

// Options configures one Index (one per P/D rule).
type Options struct {
	// ChunkBytes is the granularity of shared-prefix matching: a shared
	// prefix is found up to the last whole chunk both keys have in common
	// (or the whole query when it equals a stored key).
	ChunkBytes int `yaml:"-"`
	// StepsPerDoubling spaces boundaries geometrically once a prefix is
	// longer than ChunkBytes × StepsPerDoubling: the gap becomes
	// pow2floor(offset)/StepsPerDoubling, so a shared prefix is measured to
	// within 1/StepsPerDoubling of its length and a key costs O(log length)
	// entries (8 KiB: 32 entries, 256 KiB: 72) instead of length/ChunkBytes.
	// 0 keeps every boundary ChunkBytes apart.
	StepsPerDoubling int `yaml:"-"`
	// MaxKeyBytes caps how much of a key is indexed and matched; longer keys
	// are truncated, so a 1 MiB prompt costs no more than a 256 KiB one.
	MaxKeyBytes int `yaml:"prefix-key-max-bytes"`
	// BudgetBytes bounds SizeBytes; the least recently inserted prefixes are
	// evicted to stay under it.
	BudgetBytes int64 `yaml:"prefix-index-budget-bytes"`
}

// DefaultOptions returns the options a rule gets when nothing is configured.
func DefaultOptions() Options {
	return Options{
		ChunkBytes:       DefaultChunkBytes,
		StepsPerDoubling: DefaultSteps,
		MaxKeyBytes:      DefaultMaxKeyBytes,
		BudgetBytes:      DefaultBudgetBytes,
	}
}

// Validate reports the first out-of-range option.
func (o Options) Validate() error {
	if o.ChunkBytes < minChunkBytes || o.ChunkBytes > maxChunkBytes {
		return fmt.Errorf("radix: chunk bytes %d outside [%d, %d]", o.ChunkBytes, minChunkBytes, maxChunkBytes)
	}
	if o.StepsPerDoubling < 0 || o.StepsPerDoubling > 64 {
		return fmt.Errorf("radix: steps per doubling %d outside [0, 64]", o.StepsPerDoubling)
	}
	if o.MaxKeyBytes < o.ChunkBytes {
		return fmt.Errorf("radix: max key bytes %d below chunk bytes %d", o.MaxKeyBytes, o.ChunkBytes)
	}
	if o.BudgetBytes < 0 {
		return fmt.Errorf("radix: negative budget %d", o.BudgetBytes)
	}
	return nil
}
