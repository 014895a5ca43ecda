package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/tenant"
)

// Tenant-control routes (LoxiLB's paths), relative to BasePath.
const (
	routeAPIKeys     = "/config/ai/apikey"
	routeAPIKey      = routeAPIKeys + "/:key_id"
	routeAPIKeyUsage = routeAPIKey + "/usage"
	routeTenantLimit = "/config/ai/tenant/ratelimit"
	// routeTenantLimitOf is an infergate addition (LoxiLB has no delete):
	// delete -f of a kind: TenantLimit document needs it.
	routeTenantLimitOf = routeTenantLimit + "/:tenant_id"
)

// KeyList is GET /config/ai/apikey.
type KeyList struct {
	Keys []tenant.KeyView `json:"keys"`
}

// TenantLimitList is GET /config/ai/tenant/ratelimit.
type TenantLimitList struct {
	Tenants []tenant.TenantLimit `json:"tenants"`
}

// Keys is what the API needs of the tenant registry (*tenant.Registry).
type Keys interface {
	Create(tenant.KeySpec) (tenant.Created, error)
	List(tenantID string) []tenant.KeyView
	Get(id string) (tenant.KeyView, error)
	Patch(id string, p tenant.KeyPatch) (tenant.KeyView, error)
	Delete(id string) error
	SetTenantLimit(tenant.TenantLimit) (tenant.TenantLimit, error)
	TenantLimits(tenantID string) []tenant.TenantLimit
	DeleteTenantLimit(tenantID string) error
	KeyUsage(id string) (tenant.UsageView, error)
}

var _ Keys = (*tenant.Registry)(nil)

func (s *Server) keysOrFail(c *gin.Context) bool {
	if s.keys == nil {
		writeError(c, s.log, apierror.New(http.StatusNotImplemented, apierror.CodeUnsupported, "", "not supported",
			"this gateway runs without a tenant key store"))
		return false
	}
	return true
}

// decodeStrict reads a JSON body into v, refusing unknown fields with the
// field named (the same strictness as rule bodies).
func (s *Server) decodeStrict(c *gin.Context, v any) bool {
	if err := requireJSON(c.GetHeader(headerContentType)); err != nil {
		writeError(c, s.log, err)
		return false
	}
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		if errBodyTooLarge(err) {
			writeError(c, s.log, bodyTooLarge(s.maxBody))
		} else {
			writeError(c, s.log, apierror.BadRequest(apierror.CodeMalformedJSON, "", "malformed request", "could not read request body"))
		}
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(c, s.log, jsonError(err))
		return false
	}
	if dec.More() {
		writeError(c, s.log, apierror.BadRequest(apierror.CodeMalformedJSON, "", "malformed request", "the body holds more than one JSON value"))
		return false
	}
	return true
}

// jsonError turns encoding/json's errors into 400s naming the field.
func jsonError(err error) *apierror.Error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return apierror.BadRequest(apierror.CodeMalformedJSON, te.Field, "malformed request",
			te.Field+" must be a JSON "+te.Type.Kind().String())
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		f = strings.Trim(f, `"`)
		return apierror.BadRequest(apierror.CodeUnknownField, f, "unknown field", "unknown field "+f)
	}
	return apierror.BadRequest(apierror.CodeMalformedJSON, "", "malformed request", "request body is not valid JSON: "+msg)
}

func (s *Server) postAPIKey(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	var spec tenant.KeySpec
	if !s.decodeStrict(c, &spec) {
		return
	}
	created, err := s.keys.Create(spec)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	s.log.WithField("key_id", created.KeyID).WithField("tenant_id", created.TenantID).Info("api: API key created")
	c.Header("Cache-Control", "no-store") // the raw key is in this body, once
	c.JSON(http.StatusCreated, created)
}

func (s *Server) listAPIKeys(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	c.JSON(http.StatusOK, KeyList{Keys: s.keys.List(c.Query("tenant_id"))})
}

func (s *Server) getAPIKey(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	v, err := s.keys.Get(c.Param("key_id"))
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, v)
}

func (s *Server) patchAPIKey(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	var p tenant.KeyPatch
	if !s.decodeStrict(c, &p) {
		return
	}
	v, err := s.keys.Patch(c.Param("key_id"), p)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	s.log.WithField("key_id", v.KeyID).Info("api: API key changed")
	c.JSON(http.StatusOK, v)
}

func (s *Server) deleteAPIKey(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	if err := s.keys.Delete(c.Param("key_id")); err != nil {
		writeError(c, s.log, err)
		return
	}
	s.log.WithField("key_id", c.Param("key_id")).Info("api: API key deleted")
	c.Status(http.StatusNoContent)
}

func (s *Server) getAPIKeyUsage(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	u, err := s.keys.KeyUsage(c.Param("key_id"))
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, u)
}

func (s *Server) postTenantLimit(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	var t tenant.TenantLimit
	if !s.decodeStrict(c, &t) {
		return
	}
	out, err := s.keys.SetTenantLimit(t)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) listTenantLimits(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	c.JSON(http.StatusOK, TenantLimitList{Tenants: s.keys.TenantLimits(c.Query("tenant_id"))})
}

func (s *Server) deleteTenantLimit(c *gin.Context) {
	if !s.keysOrFail(c) {
		return
	}
	if err := s.keys.DeleteTenantLimit(c.Param("tenant_id")); err != nil {
		writeError(c, s.log, err)
		return
	}
	s.log.WithField("tenant_id", c.Param("tenant_id")).Info("api: tenant limits deleted")
	c.Status(http.StatusNoContent)
}
