package trtpoll

import (
	"testing"

	"github.com/infergate/infergate/kvexact"
)

// FuzzDrain: any drain body is either rejected by Decode or converted and
// applied without a panic, and never indexes a block of the wrong size.
func FuzzDrain(f *testing.F) {
	for _, d := range captureDrains() {
		f.Add([]byte(d))
	}
	f.Add([]byte(`[{"event_id":1,"data":{"type":"removed","block_hashes":[-1,"x",1e30]}}]`))
	f.Add([]byte(`[{"event_id":18446744073709551615,"window_size":null,"data":null}]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		envs, err := Decode(body)
		if err != nil {
			return
		}
		inv := kvexact.NewInventory(kvexact.Options{Rule: "f", BlockSize: 32, Budget: 1024, Shards: 1})
		c := Converter{BlockSize: 32}
		var b kvexact.Batch
		for i := range envs {
			seq, ok := c.Convert(&envs[i], &b)
			if !ok {
				continue
			}
			for _, e := range b.Events {
				if e.Kind == kvexact.EventBlockStored && len(e.TokenIDs) != 32*len(e.BlockHashes) {
					t.Fatalf("stored event with %d tokens for %d blocks", len(e.TokenIDs), len(e.BlockHashes))
				}
			}
			inv.Apply("ep", 0, seq, b)
		}
	})
}
