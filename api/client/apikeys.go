package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/infergate/infergate/tenant"
)

// Tenant-control paths (relative to the API base).
const (
	pathAPIKeys     = "/netlox/v1/config/ai/apikey"
	pathTenantLimit = "/netlox/v1/config/ai/tenant/ratelimit"
)

// CreateAPIKey creates a key; the answer holds the raw key (once).
func (c *Client) CreateAPIKey(ctx context.Context, s tenant.KeySpec) (tenant.Created, error) {
	var out tenant.Created
	b, err := json.Marshal(s)
	if err != nil {
		return out, fmt.Errorf("encode API key: %w", err)
	}
	return out, c.do(ctx, http.MethodPost, pathAPIKeys, b, &out)
}

// ListAPIKeys lists keys (tenantID "" = all).
func (c *Client) ListAPIKeys(ctx context.Context, tenantID string) ([]tenant.KeyView, error) {
	var out struct {
		Keys []tenant.KeyView `json:"keys"`
	}
	p := pathAPIKeys
	if tenantID != "" {
		p += "?tenant_id=" + url.QueryEscape(tenantID)
	}
	return out.Keys, c.do(ctx, http.MethodGet, p, nil, &out)
}

// GetAPIKey reads one key.
func (c *Client) GetAPIKey(ctx context.Context, id string) (tenant.KeyView, error) {
	var out tenant.KeyView
	return out, c.do(ctx, http.MethodGet, pathAPIKeys+"/"+url.PathEscape(id), nil, &out)
}

// PatchAPIKey changes a key.
func (c *Client) PatchAPIKey(ctx context.Context, id string, p tenant.KeyPatch) (tenant.KeyView, error) {
	var out tenant.KeyView
	b, err := json.Marshal(p)
	if err != nil {
		return out, fmt.Errorf("encode API key change: %w", err)
	}
	return out, c.do(ctx, http.MethodPatch, pathAPIKeys+"/"+url.PathEscape(id), b, &out)
}

// DeleteAPIKey deletes a key.
func (c *Client) DeleteAPIKey(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, pathAPIKeys+"/"+url.PathEscape(id), nil, nil)
}

// APIKeyUsage reads a key's usage counters.
func (c *Client) APIKeyUsage(ctx context.Context, id string) (tenant.UsageView, error) {
	var out tenant.UsageView
	return out, c.do(ctx, http.MethodGet, pathAPIKeys+"/"+url.PathEscape(id)+"/usage", nil, &out)
}

// SetTenantLimit sets a tenant's ceilings.
func (c *Client) SetTenantLimit(ctx context.Context, t tenant.TenantLimit) (tenant.TenantLimit, error) {
	var out tenant.TenantLimit
	b, err := json.Marshal(t)
	if err != nil {
		return out, fmt.Errorf("encode tenant limit: %w", err)
	}
	return out, c.do(ctx, http.MethodPost, pathTenantLimit, b, &out)
}

// ListTenantLimits lists tenant ceilings (tenantID "" = all).
func (c *Client) ListTenantLimits(ctx context.Context, tenantID string) ([]tenant.TenantLimit, error) {
	var out struct {
		Tenants []tenant.TenantLimit `json:"tenants"`
	}
	p := pathTenantLimit
	if tenantID != "" {
		p += "?tenant_id=" + url.QueryEscape(tenantID)
	}
	return out.Tenants, c.do(ctx, http.MethodGet, p, nil, &out)
}

// DeleteTenantLimit removes a tenant's ceilings.
func (c *Client) DeleteTenantLimit(ctx context.Context, tenantID string) error {
	return c.do(ctx, http.MethodDelete, pathTenantLimit+"/"+url.PathEscape(tenantID), nil, nil)
}
