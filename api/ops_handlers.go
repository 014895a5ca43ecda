package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/buildinfo"
)

// Operational routes: which build answers (GET /version) and which replicas
// share its rule store (GET …/replicas), so `infergate version` and
// `infergate get replicas` work with nothing but --server.
const (
	routeVersion  = "/version"
	routeReplicas = "/replicas"
)

// CodeNoSharedStore answers GET …/replicas on a gateway whose rules live in
// its own state dir: it has no replicas to list.
const CodeNoSharedStore = "no_shared_store"

// resultNoRule is LoxiLB's result text for a missing rule.
const resultNoRule = "no-rule error"

// ReplicaSource lists the gateways sharing this one's rule store (the etcd
// backend); nil means the store is not shared.
type ReplicaSource interface {
	Replicas(ctx context.Context) (ReplicaList, error)
}

// ReplicaList is GET …/replicas: every live replica and the store revision
// the listing was read at, to compare each replica's applied revision with.
type ReplicaList struct {
	Revision int64         `json:"revision"`
	Replicas []ReplicaView `json:"replicas"`
}

// ReplicaView is one replica's published state. Replicas with the same
// digest serve exactly the same rules.
type ReplicaView struct {
	ID       string    `json:"id"`
	API      string    `json:"api"`
	Revision int64     `json:"revision"`
	Rules    int       `json:"rules"`
	Digest   string    `json:"digest"`
	Updated  time.Time `json:"updated"`
}

// replicasTimeout bounds the store read behind GET …/replicas; the store's
// own request timeout is usually shorter.
const replicasTimeout = 10 * time.Second

// getVersion is GET /version: this build's version, commit and Go toolchain.
func (s *Server) getVersion(c *gin.Context) {
	c.JSON(http.StatusOK, buildinfo.Get())
}

// getReplicas is GET …/replicas.
func (s *Server) getReplicas(c *gin.Context) {
	if s.replicas == nil {
		writeError(c, s.log, apierror.New(http.StatusNotImplemented, CodeNoSharedStore, "", "not available",
			"this gateway keeps its rules in its own state dir (no serve --store etcd://…): it has no replicas to list"))
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), replicasTimeout)
	defer cancel()
	list, err := s.replicas.Replicas(ctx)
	if err != nil {
		writeError(c, s.log, apierror.New(http.StatusServiceUnavailable, apierror.CodeStoreUnavailable, "", "store unavailable",
			"list replicas: "+err.Error()))
		return
	}
	if list.Replicas == nil {
		list.Replicas = []ReplicaView{}
	}
	c.JSON(http.StatusOK, list)
}

// noRuleNamed is the 404 of a delete by a name no rule has.
func noRuleNamed(name string) error {
	return apierror.NotFound(apierror.CodeRuleNotFound, resultNoRule, "no rule is named "+strconv.Quote(name))
}
