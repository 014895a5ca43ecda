package swagger

import "reflect"

// addKVPaths documents the KV-exact (Tier 1.5) inventory route.
func addKVPaths(g *generator, v Views, paths map[string]PathItem, internal *Response) {
	if v.KVInventory == nil {
		return
	}
	inv := g.ref(reflect.TypeOf(v.KVInventory))
	paths["/config/ai/kv/inventory"] = PathItem{
		"get": {
			Tags: []string{"ai"}, Summary: "List KV-exact block inventories", OperationID: "getAIKVInventory",
			Description: "One row per (rule, eligible endpoint, DP rank) of every rule with kvExactMode: blocks indexed, " +
				"whether the inventory is trusted to steer requests and why not (disconnected, warmup, seq_gap, restart, " +
				"stale, reconnect, no_events), the last event sequence and the seconds since the endpoint's last event batch.",
			Responses: map[string]*Response{"200": {Description: "Inventory rows, sorted by rule, endpoint, rank.", Schema: inv}, "500": internal},
		},
	}
}
