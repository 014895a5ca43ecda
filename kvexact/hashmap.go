package kvexact

import "math/bits"

// u64map is the engine-hash → own-key bridge of one (endpoint, rank): an
// open-addressing table (linear probing, backward-shift deletion) of
// key/value pairs (one cache line fetch per probe), any capacity (fast range reduction) and 1.5×
// growth, so it stays between 58% and 87.5% full. That is ~22 bytes per
// entry against ~37 for a Go map[uint64]uint64 measured at 1M entries; this
// bridge is half of the per-block memory. Not safe for concurrent use: only
// its slot's writer touches it.
type u64map struct {
	slots   []kv // key 0 marks an empty slot
	count   int
	seed    uint64
	hasZero bool // key 0 lives outside the table
	zeroVal uint64
}

type kv struct{ k, v uint64 }

const u64mapMinCap = 64

func (m *u64map) home(k uint64) int {
	hi, _ := bits.Mul64((k^m.seed)*0x9e3779b97f4a7c15, uint64(len(m.slots)))
	return int(hi)
}

// find returns the slot holding k, or the empty slot where it would go;
// the table must not be full (growth keeps it below 7/8).
func (m *u64map) find(k uint64) (int, bool) {
	n := len(m.slots)
	for i := m.home(k); ; {
		switch m.slots[i].k {
		case k:
			return i, true
		case 0:
			return i, false
		}
		if i++; i == n {
			i = 0
		}
	}
}

func (m *u64map) get(k uint64) (uint64, bool) {
	if k == 0 {
		return m.zeroVal, m.hasZero
	}
	if m.count == 0 {
		return 0, false
	}
	i, ok := m.find(k)
	return m.slots[i].v, ok
}

func (m *u64map) put(k, v uint64) {
	if k == 0 {
		m.hasZero, m.zeroVal = true, v
		return
	}
	if (m.count+1)*8 > len(m.slots)*7 {
		m.grow()
	}
	i, ok := m.find(k)
	if !ok {
		m.count++
	}
	m.slots[i] = kv{k, v}
}

func (m *u64map) grow() {
	old := m.slots
	m.slots = make([]kv, max(u64mapMinCap, len(old)*3/2))
	for _, e := range old {
		if e.k != 0 {
			j, _ := m.find(e.k)
			m.slots[j] = e
		}
	}
}

func (m *u64map) del(k uint64) {
	if k == 0 {
		m.hasZero, m.zeroVal = false, 0
		return
	}
	if m.count == 0 {
		return
	}
	pos, ok := m.find(k)
	if !ok {
		return
	}
	n := len(m.slots)
	m.slots[pos] = kv{}
	m.count--
	for j := pos + 1; ; j++ {
		if j == n {
			j = 0
		}
		e := m.slots[j]
		if e.k == 0 {
			return
		}
		if h := m.home(e.k); (j-h+n)%n >= (j-pos+n)%n {
			m.slots[pos], m.slots[j] = e, kv{}
			pos = j
		}
	}
}

func (m *u64map) len() int {
	if m.hasZero {
		return m.count + 1
	}
	return m.count
}

// reset empties the map and releases its memory.
func (m *u64map) reset() {
	seed := m.seed
	*m = u64map{seed: seed}
}
