package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/tenant"
)

// getTenantLimit is GET /config/ai/tenant/ratelimit/{tenant_id}, LoxiLB's
// path for one tenant's ceilings: the tenant's limit object, or 404
// tenant_not_found when it has none.
func (s *Server) getTenantLimit(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	id := c.Param("tenant_id")
	for _, l := range s.keys.TenantLimits(id) {
		if l.TenantID == id {
			c.JSON(http.StatusOK, l)
			return
		}
	}
	writeError(c, s.log, apierror.New(http.StatusNotFound, tenant.CodeTenantNotFound, tenant.FieldTenantID,
		"tenant not found", "tenant "+id+" has no limits"))
}
