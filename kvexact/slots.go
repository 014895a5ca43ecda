package kvexact

import (
	"math/bits"
	"sync/atomic"
)

// MaxSlots is the number of (endpoint, DP rank) pairs one inventory can
// track: slots are bits of the 64-bit residency bitmaps of an entry.
const MaxSlots = 64

// slotCounts holds the number of indexed blocks per slot.
type slotCounts [MaxSlots]atomic.Int64

func (c *slotCounts) add(mask uint64) {
	for mask != 0 {
		b := bits.TrailingZeros64(mask)
		c[b].Add(1)
		mask &= mask - 1
	}
}

func (c *slotCounts) sub(mask uint64) {
	for mask != 0 {
		b := bits.TrailingZeros64(mask)
		c[b].Add(-1)
		mask &= mask - 1
	}
}
