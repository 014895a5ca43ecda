package chwbl

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/infergate/infergate/spec"
)

// Defaults and ranges, as LoxiLB's chwbl_* fields.
const (
	DefaultReplication    = 100
	DefaultMeanLoadFactor = 175
	DefaultPrefixLevel    = 1

	MinReplication    = 1
	MaxReplication    = 1024
	MinMeanLoadFactor = 100
	MaxMeanLoadFactor = 300
)

// Options configures one ring.
type Options struct {
	// Replication is the number of virtual nodes per member (per member of
	// the highest weight when Weighted).
	Replication int
	// MeanLoadFactor caps a member's load, in percent of the mean: a member
	// is skipped when load+1 > ceil(factor/100 × (Σload+1)/n).
	MeanLoadFactor int
	// MinBound is a floor on that cap, so that a lightly loaded fleet keeps
	// affinity (LoxiLB floors it at n while Σload < n). 0: no floor, the
	// textbook bound.
	MinBound int
	// Weighted scales each member's vnode count by its weight (sel 10).
	Weighted bool
}

// DefaultOptions returns the options of a sel 8 rule with nothing set.
func DefaultOptions() Options {
	return Options{Replication: DefaultReplication, MeanLoadFactor: DefaultMeanLoadFactor}
}

// FromSpec derives the options of a compiled rule; c may be nil.
func FromSpec(c *spec.CHWBL, sel spec.Selector) Options {
	o := DefaultOptions()
	o.Weighted = sel == spec.SelWeightedCHWBL
	if c == nil {
		return o
	}
	if c.Replication != 0 {
		o.Replication = c.Replication
	}
	if c.MeanLoadFactor != 0 {
		o.MeanLoadFactor = c.MeanLoadFactor
	}
	return o
}

// Validate reports the first out-of-range option.
func (o Options) Validate() error {
	if o.Replication < MinReplication || o.Replication > MaxReplication {
		return fmt.Errorf("chwbl: replication %d outside [%d, %d]", o.Replication, MinReplication, MaxReplication)
	}
	if o.MeanLoadFactor < MinMeanLoadFactor || o.MeanLoadFactor > MaxMeanLoadFactor {
		return fmt.Errorf("chwbl: mean load factor %d outside [%d, %d]", o.MeanLoadFactor, MinMeanLoadFactor, MaxMeanLoadFactor)
	}
	if o.MinBound < 0 {
		return fmt.Errorf("chwbl: negative min bound %d", o.MinBound)
	}
	return nil
}

// Member is one endpoint on the ring. Its index in the slice given to
// NewRing is the index Pick returns and passes to load and eligible.
type Member struct {
	// ID places the member's vnodes; it must be stable across rule updates
	// (spec.Endpoint.ID, "ip:port") so unchanged members keep their keys.
	ID     string
	Weight int
}

// first is a member's first vnode hash; ok is false for a member with none.
type first struct {
	hash uint64
	ok   bool
}

// point is one virtual node.
type point struct {
	hash   uint64
	member int32
}

// Ring is a consistent-hash ring with bounded loads. It is built once per
// compiled rule and never changes, except for the round-robin cursor (an
// atomic), so any number of goroutines may use it.
type Ring struct {
	points  []point // sorted by hash, then member
	members int
	factor  int
	floor   int
	firsts  []first // each member's first vnode, for round-robin
	rr      atomic.Uint64
}

// NewRing places members' vnodes. Member i's vnodes are XXH64(ID "#" j) for
// j < its vnode count, so dropping or shrinking one member moves only the
// keys its own removed vnodes held.
func NewRing(members []Member, opts Options) (*Ring, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if len(members) > math.MaxInt32 {
		return nil, fmt.Errorf("chwbl: %d members", len(members))
	}
	maxW := 0
	for _, m := range members {
		maxW = max(maxW, m.Weight)
	}
	r := &Ring{members: len(members), factor: opts.MeanLoadFactor, floor: opts.MinBound, firsts: make([]first, len(members))}
	var buf []byte
	for i, m := range members {
		n := vnodes(m.Weight, maxW, opts)
		for j := range n {
			buf = strconv.AppendInt(append(append(buf[:0], m.ID...), '#'), int64(j), 10)
			h := xxhash.Sum64(buf)
			if j == 0 {
				r.firsts[i] = first{hash: h, ok: true}
			}
			r.points = append(r.points, point{hash: h, member: int32(i)})
		}
	}
	slices.SortFunc(r.points, func(a, b point) int {
		if a.hash != b.hash {
			if a.hash < b.hash {
				return -1
			}
			return 1
		}
		return int(a.member - b.member)
	})
	return r, nil
}

// vnodes is a member's vnode count: Replication, or when weighted
// ceil(Replication × weight / max weight), 0 for weight 0.
func vnodes(weight, maxW int, o Options) int {
	if !o.Weighted {
		return o.Replication
	}
	if weight <= 0 || maxW <= 0 {
		return 0
	}
	return (o.Replication*weight + maxW - 1) / maxW
}

// Members is the number of members the ring was built with.
func (r *Ring) Members() int { return r.members }

// Points is the number of vnodes on the ring.
func (r *Ring) Points() int { return len(r.points) }

// Pick walks the ring clockwise from hash and returns the first eligible
// member whose load+1 is within the bound (see Options.MeanLoadFactor). The
// bound applies to every key, prefix hashes included (LoxiLB skips it for
// prefix hashes, which lets one hot prefix pile onto one engine). If no
// eligible member is within the bound (only possible when load changes
// under it), the least loaded eligible member it saw wins. ok is false
// when no member is eligible. load and eligible are called with member
// indices and must not block; Pick does not allocate.
func (r *Ring) Pick(hash uint64, load func(i int) int, eligible func(i int) bool) (int, bool) {
	m, _, ok := r.PickDetail(hash, load, eligible)
	return m, ok
}

// PickDetail is Pick that also reports how many eligible members were
// skipped for being over the bound before the pick (0: the key's home
// member took it), for the bound-skips metric.
func (r *Ring) PickDetail(hash uint64, load func(i int) int, eligible func(i int) bool) (member, skipped int, ok bool) {
	if len(r.points) == 0 {
		return -1, 0, false
	}
	total, n := 0, 0
	for i := range r.members {
		if eligible(i) {
			total += load(i)
			n++
		}
	}
	if n == 0 {
		return -1, 0, false
	}
	bound := max(Bound(total, n, r.factor), r.floor)

	start, _ := slices.BinarySearchFunc(r.points, hash, func(p point, h uint64) int {
		if p.hash < h {
			return -1
		}
		if p.hash > h {
			return 1
		}
		return 0
	})
	var seen [4]uint64 // members 0..255 are checked once each; beyond, re-checked
	visited := 0
	best, bestLoad := -1, math.MaxInt
	for k := range len(r.points) {
		idx := start + k
		if idx >= len(r.points) {
			idx -= len(r.points)
		}
		m := int(r.points[idx].member)
		if m < 256 {
			word, bit := m>>6, uint64(1)<<(m&63)
			if seen[word]&bit != 0 {
				continue
			}
			seen[word] |= bit
		}
		if !eligible(m) {
			continue
		}
		l := load(m)
		if l+1 <= bound {
			return m, skipped, true
		}
		skipped++
		if l < bestLoad {
			best, bestLoad = m, l
		}
		if visited++; visited == n && r.members <= 256 {
			break
		}
	}
	return best, skipped, best >= 0
}

// Bound is the largest load+1 a member may reach: ceil(factor/100 × mean)
// where mean = (total+1)/n counts the request being placed.
func Bound(total, n, factor int) int {
	if n <= 0 {
		return 0
	}
	return (factor*(total+1) + 100*n - 1) / (100 * n)
}
