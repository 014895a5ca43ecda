package radix

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// maxOwners is how many distinct endpoints one prefix remembers, most recent
// first. More than one lets Match honour the caller's candidate set (a prefix
// last served by an endpoint that is now excluded can still go to the
// endpoint that served it before).
const maxOwners = 4

// entryBytes is the accounted cost of one stored prefix: a 24-byte node in
// the arena plus its slot in the hash map (8-byte key, 4-byte value, control
// byte, at a load factor that can fall to 7/16 right after the map grows).
// BenchmarkMemoryPerPrompt checks it stays above the measured heap cost.
const entryBytes = 64

// nameOverheadBytes is the accounted cost of one endpoint name beyond its
// bytes (string header, map slot, id slice slot).
const nameOverheadBytes = 64

// maxEndpoints bounds the endpoint id space (ids are uint16, 0 means empty).
const maxEndpoints = 1<<16 - 1

// none marks the absence of a node in the int32-linked arena.
const none int32 = -1

// node is one indexed prefix: the hash of key[:n] for a boundary n (or
// the whole key). It holds no pointers, so a million nodes cost the garbage
// collector nothing to scan.
type node struct {
	hash   uint64
	prev   int32 // towards the most recently used end; none at the head
	next   int32 // towards the least recently used end; also the free list link
	owners [maxOwners]uint16
}

// Index is a prefix-affinity index: it remembers which endpoint most recently
// served each boundary prefix of each key and answers, for a new key,
// the endpoint sharing the longest prefix with it among a candidate set.
// One Index serves one rule; it is safe for concurrent use.
type Index struct {
	chunk  int
	steps  int // boundaries per doubling of the offset; 0: every chunk
	maxKey int
	budget int64

	evictions atomic.Uint64

	mu       sync.RWMutex
	byHash   map[uint64]int32
	nodes    arena
	freeHead int32
	head     int32 // most recently inserted
	tail     int32 // least recently inserted: evicted first
	live     int
	eps      endpointTable
}

// New builds an empty index.
func New(opts Options) (*Index, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Index{
		chunk:    opts.ChunkBytes,
		steps:    opts.StepsPerDoubling,
		maxKey:   opts.MaxKeyBytes,
		budget:   opts.BudgetBytes,
		byHash:   make(map[uint64]int32),
		freeHead: none,
		head:     none,
		tail:     none,
		eps:      newEndpointTable(),
	}, nil
}

// Stats is a consistent snapshot for gauges.
type Stats struct {
	Entries   int
	SizeBytes int64
	Endpoints int
	Evictions uint64 // prefixes dropped to stay within the budget, ever
}

// Entries is the number of stored prefixes (the trie-nodes gauge).
func (ix *Index) Entries() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.live
}

// SizeBytes is the accounted memory of the index; it never exceeds the
// budget.
func (ix *Index) SizeBytes() int64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.sizeLocked()
}

// Stats returns every gauge value under one lock.
func (ix *Index) Stats() Stats {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return Stats{
		Entries:   ix.live,
		SizeBytes: ix.sizeLocked(),
		Endpoints: len(ix.eps.ids),
		Evictions: ix.evictions.Load(),
	}
}

func (ix *Index) sizeLocked() int64 {
	return int64(ix.live)*entryBytes + ix.eps.bytes
}

// clip applies MaxKeyBytes.
func (ix *Index) clip(key []byte) []byte {
	if len(key) > ix.maxKey {
		return key[:ix.maxKey]
	}
	return key
}

// MatchRate is matchedBytes over the indexed length of key (key clipped to
// MaxKeyBytes), the figure the ladder compares with pd_cache_threshold.
func (ix *Index) MatchRate(key []byte, matchedBytes int) float64 {
	n := len(ix.clip(key))
	if n == 0 {
		return 0
	}
	return float64(matchedBytes) / float64(n)
}

// Insert records endpoint as the most recent owner of every boundary prefix
// of key and of key itself. The ladder calls it with the endpoint it
// finally chose, so the next request sharing a prefix follows it there.
func (ix *Index) Insert(key []byte, endpoint string) {
	if len(key) == 0 || endpoint == "" {
		return
	}
	key = ix.clip(key)
	var buf [80]uint64 // default options: up to 72 boundaries, no allocation
	hashes := ix.appendBoundaryHashes(buf[:0], key)

	ix.mu.Lock()
	defer ix.mu.Unlock()
	id, ok := ix.eps.acquire(endpoint, ix.budget)
	if !ok {
		return
	}
	// A new endpoint name may have pushed the total over budget.
	for ix.live > 0 && ix.sizeLocked() > ix.budget {
		ix.evictTail()
	}
	// Deepest first, so that shallower prefixes are always at least as
	// recent as deeper ones: eviction then removes a key from its tail
	// towards its head and the stored set stays prefix-closed, which is
	// what lets Match stop at the first missing boundary.
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		if n, ok := ix.byHash[h]; ok {
			ix.nodes.at(n).own(id)
			ix.touch(n)
			continue
		}
		limit := ix.maxNodes()
		if limit == 0 {
			return
		}
		for ix.live >= limit {
			ix.evictTail()
		}
		n := ix.alloc()
		nd := ix.nodes.at(n)
		*nd = node{hash: h, prev: none, next: none}
		nd.own(id)
		ix.pushFront(n)
		ix.byHash[h] = n
		ix.live++
	}
}

// Match returns the endpoint among candidates that owns the longest prefix it
// shares with key, and the length of that prefix in bytes. Shared prefixes
// are found to the deepest common boundary (see Options.StepsPerDoubling),
// or the whole key when it equals a stored one. It
// never returns an endpoint that is not in candidates; an empty candidate
// set matches nothing. Match does not refresh recency: the caller's Insert of
// its final choice does.
func (ix *Index) Match(key []byte, candidates []string) (endpoint string, matchedBytes int, ok bool) {
	if len(key) == 0 || len(candidates) == 0 {
		return "", 0, false
	}
	key = ix.clip(key)

	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var set candidateSet
	for _, c := range candidates {
		if id, found := ix.eps.ids[c]; found {
			set.add(id)
		}
	}
	if set.empty() {
		return "", 0, false
	}

	var d xxhash.Digest
	d.Reset()
	best := none
	off := 0
	complete := true
	for next := ix.chunk; next <= len(key); off, next = next, ix.next(next) {
		_, _ = d.Write(key[off:next])
		n, found := ix.byHash[d.Sum64()]
		if !found {
			complete = false
			break
		}
		if ix.nodes.at(n).ownedBy(&set) {
			best, matchedBytes = n, next
		}
	}
	if complete && off < len(key) {
		_, _ = d.Write(key[off:])
		if n, found := ix.byHash[d.Sum64()]; found && ix.nodes.at(n).ownedBy(&set) {
			best, matchedBytes = n, len(key)
		}
	}
	if best == none {
		return "", 0, false
	}
	return ix.eps.names[ix.nodes.at(best).firstOwner(&set)], matchedBytes, true
}

// RemoveEndpoint forgets endpoint everywhere (it went down or its breaker
// opened) and returns how many prefixes were left without any owner and
// dropped. It scans every entry: O(entries), rare by design.
func (ix *Index) RemoveEndpoint(endpoint string) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	id, ok := ix.eps.ids[endpoint]
	if !ok {
		return 0
	}
	dropped := 0
	for i := range int32(ix.nodes.len()) {
		n := ix.nodes.at(i)
		if n.owners[0] == 0 { // free slot
			continue
		}
		if n.disown(id) && n.owners[0] == 0 {
			ix.drop(i)
			dropped++
		}
	}
	ix.eps.release(endpoint, id)
	return dropped
}

// maxNodes is how many entries fit next to the endpoint names.
func (ix *Index) maxNodes() int {
	room := ix.budget - ix.eps.bytes
	if room <= 0 {
		return 0
	}
	return int(room / entryBytes)
}

func (ix *Index) evictTail() {
	if ix.tail == none {
		return
	}
	ix.drop(ix.tail)
	ix.evictions.Add(1)
}

// drop unlinks node i, removes it from the map and frees its slot.
func (ix *Index) drop(i int32) {
	ix.unlink(i)
	delete(ix.byHash, ix.nodes.at(i).hash)
	*ix.nodes.at(i) = node{prev: none, next: ix.freeHead}
	ix.freeHead = i
	ix.live--
}

// alloc returns a free arena slot.
func (ix *Index) alloc() int32 {
	if ix.freeHead != none {
		i := ix.freeHead
		ix.freeHead = ix.nodes.at(i).next
		return i
	}
	return ix.nodes.push()
}

// slabShift sizes arena slabs: 4096 nodes (96 KiB) each.
const slabShift = 12

// arena holds nodes in fixed-size slabs so growing never copies more than
// one slab and the memory held beyond the live nodes stays under one slab
// (a doubling slice would hold up to twice the nodes).
type arena struct {
	slabs [][]node
	n     int
}

func (a *arena) at(i int32) *node { return &a.slabs[i>>slabShift][i&(1<<slabShift-1)] }

func (a *arena) len() int { return a.n }

// push appends a zero node; the last slab grows by doubling up to full size.
func (a *arena) push() int32 {
	s := a.n >> slabShift
	if s == len(a.slabs) {
		a.slabs = append(a.slabs, make([]node, 0, 64))
	}
	a.slabs[s] = append(a.slabs[s], node{})
	a.n++
	return int32(a.n - 1)
}

func (ix *Index) pushFront(i int32) {
	n := ix.nodes.at(i)
	n.prev, n.next = none, ix.head
	if ix.head != none {
		ix.nodes.at(ix.head).prev = i
	}
	ix.head = i
	if ix.tail == none {
		ix.tail = i
	}
}

func (ix *Index) unlink(i int32) {
	n := ix.nodes.at(i)
	if n.prev != none {
		ix.nodes.at(n.prev).next = n.next
	} else {
		ix.head = n.next
	}
	if n.next != none {
		ix.nodes.at(n.next).prev = n.prev
	} else {
		ix.tail = n.prev
	}
	n.prev, n.next = none, none
}

func (ix *Index) touch(i int32) {
	if ix.head == i {
		return
	}
	ix.unlink(i)
	ix.pushFront(i)
}

// own makes id the most recent owner, keeping the others in recency order
// and dropping the oldest when full.
func (n *node) own(id uint16) {
	pos := maxOwners - 1
	for j, o := range n.owners {
		if o == id || o == 0 {
			pos = j
			break
		}
	}
	copy(n.owners[1:pos+1], n.owners[:pos])
	n.owners[0] = id
}

// disown removes id and reports whether it was an owner.
func (n *node) disown(id uint16) bool {
	for j, o := range n.owners {
		if o == id {
			copy(n.owners[j:], n.owners[j+1:])
			n.owners[maxOwners-1] = 0
			return true
		}
	}
	return false
}

func (n *node) ownedBy(s *candidateSet) bool {
	return n.firstOwner(s) != 0
}

// firstOwner is the most recent owner in s, or 0.
func (n *node) firstOwner(s *candidateSet) uint16 {
	for _, o := range n.owners {
		if o == 0 {
			return 0
		}
		if s.has(o) {
			return o
		}
	}
	return 0
}

// candidateSet is a set of endpoint ids built per Match on the stack: a
// bitmask for the small ids every realistic rule uses, a list beyond.
type candidateSet struct {
	low  uint64
	high []uint16
}

func (s *candidateSet) add(id uint16) {
	if id < 64 {
		s.low |= 1 << id
		return
	}
	s.high = append(s.high, id)
}

func (s *candidateSet) has(id uint16) bool {
	if id < 64 {
		return s.low&(1<<id) != 0
	}
	for _, h := range s.high {
		if h == id {
			return true
		}
	}
	return false
}

func (s *candidateSet) empty() bool { return s.low == 0 && len(s.high) == 0 }

// endpointTable interns endpoint names as small ids so nodes stay
// pointer-free. Ids are recycled after RemoveEndpoint.
type endpointTable struct {
	ids   map[string]uint16
	names []string // by id; names[0] is unused
	free  []uint16
	bytes int64 // accounted bytes of all names
}

func newEndpointTable() endpointTable {
	return endpointTable{ids: make(map[string]uint16), names: []string{""}}
}

func nameCost(name string) int64 { return int64(len(name)) + nameOverheadBytes }

// acquire returns the id of name, registering it if the budget allows.
func (t *endpointTable) acquire(name string, budget int64) (uint16, bool) {
	if id, ok := t.ids[name]; ok {
		return id, true
	}
	if t.bytes+nameCost(name) > budget || len(t.ids) >= maxEndpoints {
		return 0, false
	}
	var id uint16
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
		t.names[id] = name
	} else {
		id = uint16(len(t.names))
		t.names = append(t.names, name)
	}
	t.ids[name] = id
	t.bytes += nameCost(name)
	return id, true
}

func (t *endpointTable) release(name string, id uint16) {
	delete(t.ids, name)
	t.names[id] = ""
	t.free = append(t.free, id)
	t.bytes -= nameCost(name)
}

// next is the boundary after b: b + ChunkBytes while b is small, then
// b + pow2floor(b)/StepsPerDoubling, so a key of length L has O(steps ×
// log L) boundaries and the deepest boundary within a shared prefix of
// length S is at least S × (1 - 1/steps) (S ≥ chunk × steps).
func (ix *Index) next(b int) int {
	if ix.steps == 0 {
		return b + ix.chunk
	}
	return b + max(ix.chunk, (1<<(bits.Len(uint(b))-1))/ix.steps)
}

// appendBoundaryHashes appends XXH64(key[:n]) for every boundary n and,
// when key does not end on one, for n = len(key).
func (ix *Index) appendBoundaryHashes(dst []uint64, key []byte) []uint64 {
	var d xxhash.Digest
	d.Reset()
	off := 0
	for next := ix.chunk; next <= len(key); off, next = next, ix.next(next) {
		_, _ = d.Write(key[off:next])
		dst = append(dst, d.Sum64())
	}
	if off < len(key) {
		_, _ = d.Write(key[off:])
		dst = append(dst, d.Sum64())
	}
	return dst
}

// String describes the index for logs (never its keys).
func (ix *Index) String() string {
	s := ix.Stats()
	return fmt.Sprintf("radix.Index{entries=%d bytes=%d endpoints=%d}", s.Entries, s.SizeBytes, s.Endpoints)
}
