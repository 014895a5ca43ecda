package chwbl_test

import (
	"fmt"

	"github.com/infergate/infergate/datapath/chwbl"
	"github.com/infergate/infergate/spec"
)

// Example shows a sel 8 decision: one ring per compiled rule, a routing key
// per request, loads and eligibility read from the caller's state.
func Example() {
	eps := []spec.Endpoint{{ID: "10.0.0.1:8000", Weight: 1}, {ID: "10.0.0.2:8000", Weight: 1}, {ID: "10.0.0.3:8000", Weight: 1}}
	members := make([]chwbl.Member, len(eps))
	for i, e := range eps {
		members[i] = chwbl.Member{ID: e.ID, Weight: e.Weight}
	}
	ring, err := chwbl.NewRing(members, chwbl.FromSpec(&spec.CHWBL{PrefixHashLevel: 1}, spec.SelCHWBL))
	if err != nil {
		panic(err)
	}
	active := []int{0, 0, 0}
	key := []byte("\x1esystem\x1fYou are a helpful assistant.")
	var picks []int
	for range 4 { // four concurrent requests with the same system prompt
		h, src := ring.Key(key, 1, "model-a", "")
		m, _, _ := ring.PickDetail(h, func(i int) int { return active[i] }, func(int) bool { return true })
		active[m]++
		picks = append(picks, m)
		_ = src
	}
	fmt.Println("same home first:", picks[0] == picks[1], "spread later:", picks[2] != picks[0] || picks[3] != picks[0])
	// Output:
	// same home first: true spread later: true
}
