package enginesim

import (
	"container/list"

	"github.com/infergate/infergate/internal/kvfake"
)

// kvCache is a paged KV cache with vLLM's prefix caching: a full prompt
// block, once computed, is kept under its block hash and shared by every
// request whose prompt starts with the same blocks; unreferenced cached
// blocks stay cached until their room is needed and are then evicted least
// recently used first. Blocks a request holds that are not (yet) cached —
// the prompt blocks it still computes, its partial last block, its output —
// are counted in private. Every store and eviction is queued as the KV
// event vLLM would publish. Not safe for concurrent use (the Core's owner
// serialises it).
type kvCache struct {
	capacity  int
	blockSize int
	blocks    map[uint64]*cachedBlock
	lru       *list.List // unreferenced cached blocks; front is evicted first
	private   int
	events    []any // kvfake.BlockStored / BlockRemoved / AllBlocksCleared
}

type cachedBlock struct {
	hash uint64
	ref  int
	elem *list.Element // in lru while ref == 0
}

func newKVCache(capacity, blockSize int) *kvCache {
	return &kvCache{capacity: capacity, blockSize: blockSize, blocks: map[uint64]*cachedBlock{}, lru: list.New()}
}

// match returns how many of hashes are cached, consecutively from the first.
func (c *kvCache) match(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// free is the number of blocks neither cached nor held.
func (c *kvCache) free() int { return c.capacity - len(c.blocks) - c.private }

// available is what a new request may claim: free blocks plus unreferenced
// cached blocks (evictable), less those among hit it is about to reference.
func (c *kvCache) available(hit []uint64) int {
	n := c.free() + c.lru.Len()
	for _, h := range hit {
		if b := c.blocks[h]; b != nil && b.ref == 0 {
			n--
		}
	}
	return n
}

// used is the number of blocks referenced by running requests, for
// vllm:kv_cache_usage_perc (cached but unreferenced blocks count as free,
// as in vLLM).
func (c *kvCache) used() int { return len(c.blocks) - c.lru.Len() + c.private }

// acquire references cached blocks (a request's prefix hit).
func (c *kvCache) acquire(hashes []uint64) {
	for _, h := range hashes {
		b := c.blocks[h]
		if b.ref == 0 {
			c.lru.Remove(b.elem)
			b.elem = nil
		}
		b.ref++
	}
}

// reserve holds n private blocks, evicting cached ones as needed. The
// caller checked available first.
func (c *kvCache) reserve(n int) {
	c.private += n
	var removed []uint64
	for c.free() < 0 && c.lru.Len() > 0 {
		b := c.lru.Remove(c.lru.Front()).(*cachedBlock)
		delete(c.blocks, b.hash)
		removed = append(removed, b.hash)
	}
	if len(removed) > 0 {
		c.events = append(c.events, kvfake.BlockRemoved{BlockHashes: removed})
	}
}

// store turns private blocks [from, to) of a prompt into cached ones (they
// have just been computed) and queues BlockStored for those not cached
// already; a block another request computed meanwhile is shared instead
// and its private copy returned. tokens is the whole prompt.
func (c *kvCache) store(hashes []uint64, from, to int, tokens []uint32) {
	bs := c.blockSize
	runStart := -1
	flush := func(end int) {
		if runStart < 0 {
			return
		}
		ev := kvfake.BlockStored{
			BlockHashes: append([]uint64(nil), hashes[runStart:end]...),
			TokenIDs:    append([]uint32(nil), tokens[runStart*bs:end*bs]...),
			BlockSize:   bs,
		}
		if runStart > 0 {
			p := hashes[runStart-1]
			ev.Parent = &p
		}
		c.events = append(c.events, ev)
		runStart = -1
	}
	for i := from; i < to; i++ {
		c.private--
		if b, ok := c.blocks[hashes[i]]; ok {
			flush(i)
			if b.ref == 0 {
				c.lru.Remove(b.elem)
				b.elem = nil
			}
			b.ref++
			continue
		}
		c.blocks[hashes[i]] = &cachedBlock{hash: hashes[i], ref: 1}
		if runStart < 0 {
			runStart = i
		}
	}
	flush(to)
}

// release drops a request's references to cached blocks, last block first
// so that a prompt's tail is evicted before its head (vLLM frees blocks in
// reverse order), and returns its private blocks.
func (c *kvCache) release(hashes []uint64, private int) {
	for i := len(hashes) - 1; i >= 0; i-- {
		b := c.blocks[hashes[i]]
		if b == nil {
			continue
		}
		b.ref--
		if b.ref == 0 {
			b.elem = c.lru.PushBack(b)
		}
	}
	c.private -= private
}

// reset drops every unreferenced cached block (vLLM's reset_prefix_cache,
// which refuses while requests hold blocks) and queues AllBlocksCleared.
func (c *kvCache) reset() bool {
	if c.used() > 0 {
		return false
	}
	c.blocks = map[uint64]*cachedBlock{}
	c.lru.Init()
	c.events = append(c.events, kvfake.AllBlocksCleared{})
	return true
}

// drain returns and forgets the queued events.
func (c *kvCache) drain() []any {
	ev := c.events
	c.events = nil
	return ev
}

// cached reports whether a block hash is cached (tests).
func (c *kvCache) cached(h uint64) bool { _, ok := c.blocks[h]; return ok }
