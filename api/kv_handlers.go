package api

import (
	"net/http"
	"sort"

	"github.com/gin-gonic/gin"

	"github.com/infergate/infergate/spec"
)

// routeKVInventory lists the KV-exact block inventories (Tier 1.5).
const routeKVInventory = "/config/ai/kv/inventory"

// KVInventorySource reports the KV-exact inventories; *kvplane.Plane
// implements it. Optional: without one the list is empty.
type KVInventorySource interface {
	KVInventory() []spec.InventoryRow
}

// KVInventoryView is the GET …/ai/kv/inventory answer: one row per
// (rule, eligible endpoint, DP rank).
type KVInventoryView struct {
	Rows []spec.InventoryRow `json:"rows"`
}

// getKVInventory answers why an endpoint does or does not steer KV-exact
// routing: blocks held, trust and its reason, last sequence, event age.
func (s *Server) getKVInventory(c *gin.Context) {
	out := KVInventoryView{Rows: []spec.InventoryRow{}}
	if src := s.kv; src != nil {
		if rows := src.KVInventory(); rows != nil {
			out.Rows = rows
		}
	}
	sort.SliceStable(out.Rows, func(i, j int) bool {
		a, b := out.Rows[i], out.Rows[j]
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		if a.Endpoint != b.Endpoint {
			return a.Endpoint < b.Endpoint
		}
		return a.Rank < b.Rank
	})
	c.JSON(http.StatusOK, out)
}
