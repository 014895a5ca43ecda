package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/infergate/infergate/api/auth"
)

const headerWWWAuthenticate = "WWW-Authenticate"

// authorize is the access-control layer: it runs after recovery and before
// the body limit, so a refused request costs no body read and no handler.
func (s *Server) authorize(c *gin.Context) {
	if s.guard == nil {
		c.Next()
		return
	}
	d := s.guard.Check(c.Request.Host, c.GetHeader("Authorization"), s.access(c.Request.Method, c.FullPath()))
	if d == nil {
		c.Next()
		return
	}
	s.metrics.API.AuthDenied.WithLabelValues(d.Reason).Inc()
	if d.Challenge != "" {
		c.Header(headerWWWAuthenticate, d.Challenge)
	}
	writeError(c, s.log, d.Err)
}

// access is what a route needs. Reads (and explain, which changes nothing)
// take a read-only token; everything else changes state and takes a
// read-write one. Unmatched routes need a read token so an anonymous client
// cannot map the API by its 404s.
func (s *Server) access(method, route string) auth.Access {
	switch route {
	case "/healthz", "/readyz", routeReadyzPD:
		return auth.AccessProbe
	case routeMetrics, BasePath + routeMetrics:
		return s.guard.MetricsAccess()
	case BasePath + routeSwaggerJSON, BasePath + routeDocs, BasePath + routeDocs + "/*file":
		return auth.AccessPublic
	case BasePath + routeLBExplain:
		return auth.AccessRead
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return auth.AccessRead
	}
	if route == "" {
		return auth.AccessRead
	}
	return auth.AccessWrite
}
