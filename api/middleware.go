package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/infergate/infergate/apierror"
	"github.com/sirupsen/logrus"
)

// routeUnmatched labels requests that matched no route, so scanners cannot
// create one series per probed path.
const routeUnmatched = "unmatched"

// observe records the request counter and latency by route template. It is
// the outermost middleware so it sees the status written by recovery.
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = routeUnmatched
	}
	method := c.Request.Method
	s.metrics.API.Requests.WithLabelValues(method, route, strconv.Itoa(c.Writer.Status())).Inc()
	s.metrics.API.Latency.WithLabelValues(method, route).Observe(time.Since(start).Seconds())
}

// recoverJSON turns a handler panic into a JSON 500 and counts it; the daemon
// keeps serving.
func (s *Server) recoverJSON(c *gin.Context) {
	defer func() {
		rec := recover()
		if rec == nil {
			return
		}
		if rec == http.ErrAbortHandler {
			panic(rec) // the client went away; let net/http handle it
		}
		s.metrics.API.Panics.Inc()
		s.log.WithFields(logrus.Fields{
			"method": c.Request.Method,
			"route":  c.FullPath(),
			"panic":  fmt.Sprint(rec),
		}).Error("api: handler panic")
		if c.Writer.Written() {
			c.Abort()
			return
		}
		c.AbortWithStatusJSON(http.StatusInternalServerError, errorBodyOf(internalError()))
	}()
	c.Next()
}

// limitBody caps every request body; readBody turns overflow into 413.
func (s *Server) limitBody(c *gin.Context) {
	if c.Request.Body != nil {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.maxBody)
	}
	c.Next()
}

// bootGate refuses writes until the store has replayed its persisted rules,
// so a client cannot race boot and have its change overwritten by replay.
func (s *Server) bootGate(c *gin.Context) {
	if !s.store.Ready() {
		writeError(c, s.log, s.notBooted())
		return
	}
	c.Next()
}

// Codes for failures that only the HTTP edge can detect (apierror holds the
// ones the rule layers produce). Stable like apierror's.
const (
	codeRouteNotFound    = "route_not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeBodyTooLarge     = "body_too_large"
	// codeUnsupportedMediaType: POST body not declared as JSON.
	codeUnsupportedMediaType = "unsupported_media_type"
)

func apiNotFound(msg string) *apierror.Error {
	return apierror.New(http.StatusNotFound, codeRouteNotFound, "", "Resource not found", msg)
}

func methodNotAllowed(method, path string) *apierror.Error {
	return apierror.New(http.StatusMethodNotAllowed, codeMethodNotAllowed, "", "Method not allowed",
		method+" is not allowed on "+path)
}

func bodyTooLarge(limit int64) *apierror.Error {
	return apierror.New(http.StatusRequestEntityTooLarge, codeBodyTooLarge, "", "Request entity too large",
		"request body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
}
