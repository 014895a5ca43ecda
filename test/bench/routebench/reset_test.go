package main

import "testing"

// TestReadsNoInventory: only arms that never read the KV-event inventory
// skip the wait for a cache reset to reach the gateway; every KV-reading
// arm, and an arm the bench does not know, waits.
func TestReadsNoInventory(t *testing.T) {
	for _, tt := range []struct {
		arm  string
		want bool
	}{
		{armRR, true}, {armLeast, true}, {armPrefix, true}, {armIdeal, true}, {armPDLeast, true}, {armPDPrefix, true},
		{armKV, false}, {armPDKV, false}, {armKVLegacy, false}, {armEPPKV, false}, {"llm-d", false},
	} {
		if got := readsNoInventory(tt.arm); got != tt.want {
			t.Errorf("readsNoInventory(%q) = %v, want %v", tt.arm, got, tt.want)
		}
	}
}
