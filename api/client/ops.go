package client

import (
	"context"
	"net/http"
	"time"

	"github.com/infergate/infergate/buildinfo"
)

// Operational reads (api/ops_handlers.go).
const (
	pathVersion  = basePath + "/version"
	pathReplicas = basePath + "/replicas"
)

// Version asks the server which build it runs (GET /version).
func (c *Client) Version(ctx context.Context) (buildinfo.Info, error) {
	var bi buildinfo.Info
	err := c.do(ctx, http.MethodGet, pathVersion, nil, &bi)
	return bi, err
}

// Replica is one gateway sharing the server's rule store, as GET
// …/replicas lists it.
type Replica struct {
	ID       string    `json:"id"`
	API      string    `json:"api"`
	Revision int64     `json:"revision"`
	Rules    int       `json:"rules"`
	Digest   string    `json:"digest"`
	Updated  time.Time `json:"updated"`
}

// ReplicaList is GET …/replicas' answer.
type ReplicaList struct {
	Revision int64     `json:"revision"`
	Replicas []Replica `json:"replicas"`
}

// Replicas lists the replicas of the server's shared store. A gateway with
// its own file store answers 501 no_shared_store.
func (c *Client) Replicas(ctx context.Context) (ReplicaList, error) {
	var l ReplicaList
	err := c.do(ctx, http.MethodGet, pathReplicas, nil, &l)
	return l, err
}
