package kvexact

import (
	"sync"
)

// The block index: own key → which (endpoint, rank) slots hold the block, on
// which tier. Sharded by key; each shard has its own RWMutex, map, chunked
// entry slab and LRU list (budget/shards entries each), so the request path
// takes one read lock per probed block and never writes.

// entry is one indexed block: 32 bytes. gpu and cpu are slot bitmaps (bit i
// = slot i of the inventory), so one entry serves every endpoint of the rule.
type entry struct {
	key        uint64
	gpu, cpu   uint64
	prev, next uint32 // LRU links (entry indices; 0 = none)
}

// chunkBits sizes the slab chunks: growth allocates 4096 entries (128 KiB)
// at a time instead of doubling a slice, keeping slack per shard bounded.
const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

type shard struct {
	mu      sync.RWMutex
	idx     map[uint64]uint32
	chunks  []*[chunkSize]entry
	n       uint32 // entries ever allocated (index 0 reserved)
	free    uint32 // free-list head, linked through next
	head    uint32 // most recently stored
	tail    uint32 // least recently stored: evicted first
	budget  int
	evicted uint64 // guarded by mu; drained by the inventory
	_       [40]byte
}

func (s *shard) at(i uint32) *entry { return &s.chunks[i>>chunkBits][i&chunkMask] }

func (s *shard) alloc() uint32 {
	if s.free != 0 {
		i := s.free
		s.free = s.at(i).next
		return i
	}
	if s.n == 0 {
		s.n = 1 // index 0 is the nil link
	}
	if int(s.n>>chunkBits) == len(s.chunks) {
		s.chunks = append(s.chunks, new([chunkSize]entry))
	}
	i := s.n
	s.n++
	return i
}

func (s *shard) unlink(i uint32) {
	e := s.at(i)
	if e.prev != 0 {
		s.at(e.prev).next = e.next
	} else {
		s.head = e.next
	}
	if e.next != 0 {
		s.at(e.next).prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = 0, 0
}

func (s *shard) pushFront(i uint32) {
	e := s.at(i)
	e.prev, e.next = 0, s.head
	if s.head != 0 {
		s.at(s.head).prev = i
	}
	s.head = i
	if s.tail == 0 {
		s.tail = i
	}
}

// release drops entry i entirely; counts are the caller's business.
func (s *shard) release(i uint32) {
	s.unlink(i)
	e := s.at(i)
	delete(s.idx, e.key)
	*e = entry{next: s.free}
	s.free = i
}

// store sets bit on the tier's bitmap of key, touching it (LRU by last
// store); at the budget it first evicts the least recently stored entry.
func (s *shard) store(key uint64, bit uint64, cpu bool, counts *slotCounts) {
	i, ok := s.idx[key]
	if !ok {
		if len(s.idx) >= s.budget && s.tail != 0 {
			v := s.at(s.tail)
			counts.sub(v.gpu | v.cpu)
			s.release(s.tail)
			s.evicted++
		}
		i = s.alloc()
		s.at(i).key = key
		s.idx[key] = i
		s.pushFront(i)
	} else if s.head != i {
		s.unlink(i)
		s.pushFront(i)
	}
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
	i, ok := s.idx[key]
	if !ok {
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
		s.release(i)
	}
	return false
}

// clearBits removes mask from every entry: O(entries), used for restarts,
// gaps and AllBlocksCleared, which are rare.
func (s *shard) clearBits(mask uint64) {
	for _, i := range s.idx {
		e := s.at(i)
		e.gpu &^= mask
		e.cpu &^= mask
		if e.gpu|e.cpu == 0 {
			s.release(i)
		}
	}
}

func (s *shard) get(key uint64) (gpu, cpu uint64) {
	if i, ok := s.idx[key]; ok {
		e := s.at(i)
		return e.gpu, e.cpu
	}
	return 0, 0
}
