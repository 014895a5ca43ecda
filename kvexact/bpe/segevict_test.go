package bpe

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// A client that sends every segment of a flood of unique ones several
// times gets each promoted to the segment cache, which fills again and
// again; the segments other requests keep using (a shared system prompt)
// must stay cached through it. Clearing the full cache flushed them at
// every fill, so every tenant's next prompt paid a full encode. The hot
// set here is used once per 16 flood segments, far less often than the
// cache's ~90 entries turn over, and is never missed; once it stops being
// used, the flood evicts it (the cache does not keep dead prompts).
func TestSegmentFloodKeepsHotSet(t *testing.T) {
	const (
		hotSegments = 8
		floodUnique = 800
		floodAfter  = 400 // flood segments after the hot set's last use
		hotEvery    = 16  // flood segments between two uses of the hot set
	)
	hot := make([]string, hotSegments)
	for i := range hot {
		hot[i] = fmt.Sprintf("System prompt %d: route each request to the engine that holds its prefix. ", i) +
			strings.Repeat("Answer briefly, cite the tool output, never invent a figure. ", 8)
	}
	flood := func(i int) string {
		return fmt.Sprintf("flood %d: ", i) + strings.Repeat("a unique segment that only the flooding client ever sends. ", 6)
	}
	for _, tc := range []struct {
		name      string
		sightings int // how many times the flood sends each segment
	}{
		{"each flood segment twice (promoted, never used again)", 2},
		{"each flood segment four times (promoted, then hit twice)", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := LoadFileWith(filepath.Join("testdata", "qwen3", "tokenizer.json.gz"), tinyCaches)
			if err != nil {
				t.Fatal(err)
			}
			cached := func(seg string) bool {
				tok.segMu.RLock()
				defer tok.segMu.RUnlock()
				_, ok := tok.segs[seg]
				return ok
			}
			for range 2 { // seen twice: promoted
				for _, s := range hot {
					tok.Encode(s, false)
				}
			}
			misses, promoted := 0, 0
			for i := range floodUnique {
				for range tc.sightings {
					tok.Encode(flood(i), false)
				}
				if cached(flood(i)) {
					promoted++
				}
				if (i+1)%hotEvery != 0 {
					continue
				}
				for _, s := range hot {
					if !cached(s) {
						misses++
					}
					tok.Encode(s, false)
				}
			}
			checkSegmentBytes(t, tok)
			uses := hotSegments * (floodUnique / hotEvery)
			t.Logf("hot set: %d misses in %d uses; %d flood segments promoted; cache holds %d bytes of %d",
				misses, uses, promoted, tok.segBytes, tok.opts.SegmentCacheBytes)
			if promoted < floodUnique*9/10 {
				t.Fatalf("only %d of %d flood segments were promoted: the flood did not fill the cache", promoted, floodUnique)
			}
			if need := 4 * tok.opts.SegmentCacheBytes; promoted*segmentSize(flood(0), tok.encodeSegment(nil, flood(0))) < need {
				t.Fatalf("the flood promoted fewer than %d bytes: it did not turn the cache over", need)
			}
			if misses != 0 {
				t.Errorf("the flood evicted the hot set %d times in %d uses", misses, uses)
			}
			for i := floodUnique; i < floodUnique+floodAfter; i++ {
				for range tc.sightings {
					tok.Encode(flood(i), false)
				}
			}
			for i, s := range hot {
				if cached(s) {
					t.Errorf("hot segment %d is still cached %d flood segments after its last use", i, floodAfter)
				}
			}
			checkSegmentBytes(t, tok)
		})
	}
}
