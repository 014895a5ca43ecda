package kvexact

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/infergate/infergate/internal/kvfake"
)

// Benchmarks of the hot paths; report ratios against the baselines measured
// in the same run (the CI box is noisy):
//
//	go test -run=NONE -bench=. -benchmem ./kvexact/

const (
	benchBlocksPerEvent = 4
	benchEventsPerBatch = 8
	benchBlocksPerBatch = benchBlocksPerEvent * benchEventsPerBatch
)

// benchBatches encodes n distinct batches of 16-token blocks (vLLM shape:
// each event a fresh 4-block chain from the root).
func benchBatches(b *testing.B, n int, enc kvfake.Encoding) [][]byte {
	b.Helper()
	rng := rand.New(rand.NewPCG(42, 1024))
	out := make([][]byte, n)
	for i := range out {
		var evs []any
		for e := 0; e < benchEventsPerBatch; e++ {
			ev := kvfake.BlockStored{BlockSize: 16, TokenIDs: make([]uint32, 16*benchBlocksPerEvent)}
			for t := range ev.TokenIDs {
				ev.TokenIDs[t] = rng.Uint32N(151000)
			}
			for k := 0; k < benchBlocksPerEvent; k++ {
				ev.BlockHashes = append(ev.BlockHashes, rng.Uint64())
			}
			evs = append(evs, ev)
		}
		rank := 0
		raw, err := kvfake.Encode(kvfake.Batch{TS: 1.7e9, Events: evs, Rank: &rank}, enc)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = raw
	}
	return out
}

// benchEncodings are the two shapes vLLM publishes a batch in: positional
// arrays and (full) maps; every decode benchmark runs over both.
var benchEncodings = []struct {
	name string
	e    kvfake.Encoding
}{{"array", kvfake.Encoding{}}, {"map", kvfake.Encoding{MapEvents: true, Full: true}}}

// rusageThread is RUSAGE_THREAD (Linux): CPU time of the calling thread only.
const rusageThread = 1

func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(rusageThread, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuLoop runs f b.N times on a locked OS thread and reports the thread's
// CPU time per op next to wall time: on a shared, overloaded box wall time
// mostly measures the neighbours (background GC work is not included).
func cpuLoop(b *testing.B, blocksPerOp int, f func(i int)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	c0 := threadCPU()
	for i := 0; i < b.N; i++ {
		f(i)
	}
	cpu := threadCPU() - c0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if blocksPerOp > 0 {
		b.ReportMetric(float64(b.N*blocksPerOp)/cpu.Seconds(), "cpu-blocks/s")
	}
}

// BenchmarkDecodeBaselineMsgpack is the baseline: vmihailenco/msgpack's
// generic decode of the same bytes into interface values.
func BenchmarkDecodeBaselineMsgpack(b *testing.B) {
	for _, enc := range benchEncodings {
		b.Run(enc.name, func(b *testing.B) {
			raws := benchBatches(b, 64, enc.e)
			cpuLoop(b, benchBlocksPerBatch, func(i int) {
				var v any
				if err := msgpack.Unmarshal(raws[i%len(raws)], &v); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

func BenchmarkDecodeBatch(b *testing.B) {
	for _, enc := range benchEncodings {
		b.Run(enc.name, func(b *testing.B) {
			raws := benchBatches(b, 64, enc.e)
			var batch Batch
			cpuLoop(b, benchBlocksPerBatch, func(i int) {
				if err := DecodeBatch(raws[i%len(raws)], &batch); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkIngest is decode + Apply of fresh 16-token blocks (the first
// pass over 131k distinct blocks inserts, later passes re-touch).
func BenchmarkIngest(b *testing.B) {
	for _, enc := range benchEncodings {
		b.Run(enc.name, func(b *testing.B) {
			raws := benchBatches(b, 4096, enc.e)
			inv, _, _ := newTestInv(b, nil)
			var batch Batch
			cpuLoop(b, benchBlocksPerBatch, func(i int) {
				if err := DecodeBatch(raws[i%len(raws)], &batch); err != nil {
					b.Fatal(err)
				}
				inv.Apply("10.0.0.1:8000", 0, uint64(i), batch)
			})
		})
	}
}

// buildLookupInventory indexes 1M blocks over 8 endpoints (125k each, in
// 16-block chains) plus a 256-block prompt held fully by ep3, 200 blocks
// deep by ep5 (GPU) and 64 deep by ep6 (CPU).
func buildLookupInventory(b *testing.B) (*Inventory, []uint64, []string) {
	inv, _, _ := newTestInv(b, func(o *Options) { o.Budget = 1_200_000 })
	eps := []string{"ep0", "ep1", "ep2", "ep3", "ep4", "ep5", "ep6", "ep7"}
	rng := rand.New(rand.NewPCG(7, 8))
	tokens := make([]uint32, 16*16)
	hashes := make([]uint64, 16)
	for _, ep := range eps {
		for c := 0; c < 125_000/16; c++ {
			for i := range tokens {
				tokens[i] = rng.Uint32N(151000)
			}
			for i := range hashes {
				hashes[i] = rng.Uint64()
			}
			inv.Apply(ep, 0, uint64(c), Batch{Events: []Event{{Kind: EventBlockStored, BlockSize: 16, TokenIDs: tokens, BlockHashes: hashes}}})
		}
	}
	promptTokens := make([]uint32, 4096)
	for i := range promptTokens {
		promptTokens[i] = rng.Uint32N(151000)
	}
	ph := make([]uint64, 256)
	for i := range ph {
		ph[i] = rng.Uint64()
	}
	put := func(ep string, n int, medium Medium) {
		next, _ := inv.NextSeq(ep, 0)
		inv.Apply(ep, 0, next, Batch{Events: []Event{{Kind: EventBlockStored, BlockSize: 16, Medium: medium, TokenIDs: promptTokens[:n*16], BlockHashes: ph[:n]}}})
	}
	put("ep3", 256, MediumGPU)
	put("ep5", 200, MediumGPU)
	put("ep6", 64, MediumCPU)
	return inv, KeysForTokens(promptTokens, 16), eps
}

// BenchmarkScore256Blocks: lookup of a 4,096-token prompt (256 blocks)
// against 1M indexed blocks over 8 endpoints, excluding tokenisation; the
// baseline is 256 probes of a plain Go map of the same size.
func BenchmarkScore256Blocks(b *testing.B) {
	inv, keys, eps := buildLookupInventory(b)
	if s := inv.Score(keys, eps); s[3].Blocks != 256 || s[5].Blocks != 200 || s[6].CPUBlocks != 64 {
		b.Fatalf("unexpected scores %+v", s)
	}
	b.Run("baseline-map-probe", func(b *testing.B) {
		m := make(map[uint64]uint64, 1_000_000)
		for i := uint64(0); i < 1_000_000; i++ {
			m[i*0x9e3779b97f4a7c15] = i
		}
		var sink uint64
		cpuLoop(b, 0, func(int) {
			for _, k := range keys {
				sink += m[k]
			}
		})
		_ = sink
	})
	b.Run("score", func(b *testing.B) {
		lat := make([]time.Duration, 0, min(b.N, 1_000_000))
		b.ReportAllocs()
		cpuLoop(b, 0, func(int) { timeInto(&lat, func() { inv.Score(keys, eps) }) })
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	})
	// score-cold: each score after 32 MiB of other memory has been
	// walked, as a pick finds the index after a request's gRPC, tokenizer
	// and collector work: the lookups' cache misses, not their
	// instructions, are the cost. Only the score is timed.
	b.Run("score-cold", func(b *testing.B) {
		evict := make([]uint64, 4<<20)
		lat := make([]time.Duration, 0, 4096)
		for b.Loop() {
			b.StopTimer()
			for i := range evict {
				evict[i] += uint64(i)
			}
			b.StartTimer()
			timeInto(&lat, func() { inv.Score(keys, eps) })
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	})
	b.Run("keys-for-tokens", func(b *testing.B) {
		toks := make([]uint32, 4096)
		cpuLoop(b, 256, func(int) { KeysForTokens(toks, 16) })
	})
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkBytesPerBlock reports the heap delta per indexed block after
// inserting 1M blocks held by one endpoint through Apply (index entry, map
// slot, LRU links and the engine-hash bridge), and for the index alone.
func BenchmarkBytesPerBlock(b *testing.B) {
	const n = 1_000_000
	b.Run("apply", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			tokens := make([]uint32, 16*16)
			hashes := make([]uint64, 16)
			ev := []Event{{Kind: EventBlockStored, BlockSize: 16, TokenIDs: tokens, BlockHashes: hashes}}
			before := heapAlloc()
			inv, _, _ := newTestInv(b, func(o *Options) { o.Budget = n + n/8 }) // per-shard budgets: headroom
			for c := 0; c < n/16; c++ {
				for t := range tokens {
					tokens[t] = uint32(c*256 + t)
				}
				for h := range hashes {
					hashes[h] = uint64(c*16 + h)
				}
				inv.Apply("ep0", 0, uint64(c), Batch{Events: ev})
			}
			after := heapAlloc()
			if inv.Len() != n {
				b.Fatalf("indexed %d blocks, want %d", inv.Len(), n)
			}
			b.ReportMetric(float64(after-before)/n, "bytes/block")
			runtime.KeepAlive(inv)
		}
	})
	b.Run("index-only", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			before := heapAlloc()
			inv, _, _ := newTestInv(b, func(o *Options) { o.Budget = n })
			for k := uint64(1); k <= n; k++ {
				inv.storeKey(k*0x9e3779b97f4a7c15, 1, false)
			}
			after := heapAlloc()
			b.ReportMetric(float64(after-before)/n, "bytes/block")
			runtime.KeepAlive(inv)
		}
	})
}

// timeInto runs f and records how long it took in lat while lat has room
// (its capacity bounds the samples kept).
func timeInto(lat *[]time.Duration, f func()) {
	t0 := time.Now()
	f()
	if len(*lat) < cap(*lat) {
		*lat = append(*lat, time.Since(t0))
	}
}
