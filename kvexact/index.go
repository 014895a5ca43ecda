package kvexact

import (
	"sync"
	"sync/atomic"
)

// The block index: own key → which (endpoint, rank) slots hold the block, on
// which tier. Sharded by key; each shard has its own RWMutex, an
// open-addressing table of entry indices, a chunked entry slab and a CLOCK
// hand, so the request path takes one read lock per probed block and never
// writes.
//
// Memory per indexed block: a 24-byte entry + one 4-byte table slot at a load
// factor between 0.35 and 0.7 (+ a CLOCK bit). A Go map[uint64]uint32 plus
// LRU links measured ~71 B/block; this layout is what makes the budget.
//
// Eviction is CLOCK (second chance), an LRU approximation by last touch: a
// store sets the entry's reference bit, the hand clears set bits and evicts
// the first entry found clear. Reads never touch, so lookups stay read-only.

// entry is one indexed block. gpu and cpu are slot bitmaps (bit i = slot i
// of the inventory), so one entry serves every endpoint of the rule. A live
// entry always has a bit set; all-zero bitmaps mark a free entry.
type entry struct {
	key      uint64
	gpu, cpu uint64
}

// chunkBits sizes the slab chunks: growth allocates 4096 entries (96 KiB)
// at a time instead of doubling a slice, keeping slack per shard bounded.
const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1

	minTableBits = 8
	// maxLoad is the table load (×1/10) that triggers doubling.
	maxLoadTenths = 7
)

type chunk struct {
	e   [chunkSize]entry
	ref [chunkSize / 64]uint64 // CLOCK reference bits
}

type shard struct {
	mu      sync.RWMutex
	table   []uint32 // entry index per slot; 0 = empty
	shift   uint     // 64 - log2(len(table))
	count   int
	chunks  []*chunk
	n       uint32   // next never-used entry index (0 is the empty marker)
	free    []uint32 // released entry indices
	hand    uint32   // CLOCK hand
	budget  int
	seed    uint64         // per-inventory secret: prompt authors cannot aim at one probe chain
	evicted *atomic.Uint64 // inventory-wide eviction tally, drained into the metric
}

func (s *shard) init(budget int, seed uint64, evicted *atomic.Uint64) {
	s.budget, s.seed, s.n, s.evicted = budget, seed, 1, evicted
	s.table = make([]uint32, 1<<minTableBits)
	s.shift = 64 - minTableBits
}

func (s *shard) at(i uint32) *entry { return &s.chunks[i>>chunkBits].e[i&chunkMask] }

func (s *shard) home(key uint64) uint64 { return ((key ^ s.seed) * 0x9e3779b97f4a7c15) >> s.shift }

// find returns the entry index of key and its table position, or the empty
// position where it would go.
func (s *shard) find(key uint64) (idx uint32, pos uint64) {
	mask := uint64(len(s.table) - 1)
	for pos = s.home(key); ; pos = (pos + 1) & mask {
		i := s.table[pos]
		if i == 0 || s.at(i).key == key {
			return i, pos
		}
	}
}

func (s *shard) grow() {
	old := s.table
	s.table = make([]uint32, 2*len(old))
	s.shift--
	mask := uint64(len(s.table) - 1)
	for _, i := range old {
		if i == 0 {
			continue
		}
		pos := s.home(s.at(i).key)
		for s.table[pos] != 0 {
			pos = (pos + 1) & mask
		}
		s.table[pos] = i
	}
}

// unindex removes the table slot at pos with backward-shift deletion (no
// tombstones, so probe chains never rot under churn).
func (s *shard) unindex(pos uint64) {
	mask := uint64(len(s.table) - 1)
	s.table[pos] = 0
	s.count--
	for j := (pos + 1) & mask; s.table[j] != 0; j = (j + 1) & mask {
		h := s.home(s.at(s.table[j]).key)
		if (j-h)&mask >= (j-pos)&mask {
			s.table[pos], s.table[j] = s.table[j], 0
			pos = j
		}
	}
}

func (s *shard) alloc() uint32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	if int(s.n>>chunkBits) == len(s.chunks) {
		s.chunks = append(s.chunks, new(chunk))
	}
	i := s.n
	s.n++
	return i
}

// release frees entry i whose table slot is pos.
func (s *shard) release(i uint32, pos uint64) {
	s.unindex(pos)
	*s.at(i) = entry{}
	s.free = append(s.free, i)
}

func (s *shard) setRef(i uint32) { s.chunks[i>>chunkBits].ref[(i&chunkMask)>>6] |= 1 << (i & 63) }

// evictOne advances the CLOCK hand to the first live entry whose reference
// bit is clear (clearing set bits on the way) and evicts it. Two sweeps at
// most: the first clears every bit.
func (s *shard) evictOne(counts *slotCounts) {
	for range 2 * s.n {
		s.hand++
		if s.hand >= s.n {
			s.hand = 1
		}
		i := s.hand
		e := s.at(i)
		if e.gpu|e.cpu == 0 {
			continue
		}
		w := &s.chunks[i>>chunkBits].ref[(i&chunkMask)>>6]
		if b := uint64(1) << (i & 63); *w&b != 0 {
			*w &^= b
			continue
		}
		counts.sub(e.gpu | e.cpu)
		_, pos := s.find(e.key)
		s.release(i, pos)
		s.evicted.Add(1)
		return
	}
}

// store sets bit on the tier's bitmap of key and touches it; at the budget
// it first evicts by CLOCK.
func (s *shard) store(key uint64, bit uint64, cpu bool, counts *slotCounts) {
	i, pos := s.find(key)
	if i == 0 {
		if s.count >= s.budget {
			s.evictOne(counts)
			_, pos = s.find(key) // eviction may have shifted the table
		}
		i = s.alloc()
		s.at(i).key = key
		s.table[pos] = i
		s.count++
		if s.count*10 > len(s.table)*maxLoadTenths {
			s.grow()
		}
	}
	s.setRef(i)
	e := s.at(i)
	if (e.gpu|e.cpu)&bit == 0 {
		counts.add(bit)
	}
	if cpu {
		e.cpu |= bit
	} else {
		e.gpu |= bit
	}
}

// remove clears bit on one tier of key and reports whether the slot still
// holds the block on another tier.
func (s *shard) remove(key uint64, bit uint64, cpu bool, counts *slotCounts) (stillHeld bool) {
	i, pos := s.find(key)
	if i == 0 {
		return false
	}
	e := s.at(i)
	had := (e.gpu|e.cpu)&bit != 0
	if cpu {
		e.cpu &^= bit
	} else {
		e.gpu &^= bit
	}
	if (e.gpu|e.cpu)&bit != 0 {
		return true
	}
	if had {
		counts.sub(bit)
	}
	if e.gpu|e.cpu == 0 {
		s.release(i, pos)
	}
	return false
}

// clearBits removes mask from every entry: O(entries), used for restarts,
// gaps and AllBlocksCleared, which are rare.
func (s *shard) clearBits(mask uint64) {
	for i := uint32(1); i < s.n; i++ {
		e := s.at(i)
		if e.gpu|e.cpu == 0 || (e.gpu|e.cpu)&mask == 0 {
			continue
		}
		e.gpu &^= mask
		e.cpu &^= mask
		if e.gpu|e.cpu == 0 {
			_, pos := s.find(e.key)
			s.release(i, pos)
		}
	}
}

func (s *shard) get(key uint64) (gpu, cpu uint64) {
	if i, _ := s.find(key); i != 0 {
		e := s.at(i)
		return e.gpu, e.cpu
	}
	return 0, 0
}

func (s *shard) len() int { return s.count }
