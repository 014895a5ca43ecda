package swagger

import (
	"reflect"

	"github.com/infergate/infergate/tenant"
)

// addTenantPaths documents the tenant controls: API keys that clients send
// to VIPs whose rule enforces them, and per-tenant ceilings.
func addTenantPaths(g *generator, paths map[string]PathItem, errs *Schema, internal *Response) {
	spec := g.ref(reflect.TypeOf(tenant.KeySpec{}))
	view := g.ref(reflect.TypeOf(tenant.KeyView{}))
	created := g.ref(reflect.TypeOf(tenant.Created{}))
	patch := g.ref(reflect.TypeOf(tenant.KeyPatch{}))
	usage := g.ref(reflect.TypeOf(tenant.UsageView{}))
	limit := g.ref(reflect.TypeOf(tenant.TenantLimit{}))
	list := &Schema{Type: "object", Properties: map[string]*Schema{"keys": {Type: "array", Items: view}}}
	limits := &Schema{Type: "object", Properties: map[string]*Schema{"tenants": {Type: "array", Items: limit}}}
	fail := func(desc string, ex errorExample) *Response {
		return &Response{Description: desc, Schema: errs, Examples: map[string]interface{}{mimeJSON: ex}}
	}
	bad := fail("Invalid body (error_code and field name the problem).", errorExample{400,
		"burst_size must be at least rate_limit_rps", "burst_size must be at least rate_limit_rps", "invalid_combination", "burst_size"})
	missing := fail("No API key with this id.", errorExample{404,
		"no API key with id 0123456789abcdef", "apikey not found", "apikey_not_found", "key_id"})
	keyID := pathParam("key_id", "The key's id (16 hex digits; the part after lxb_ in the raw key).")
	tenantQ := queryParam("tenant_id", "string", "Only this tenant's entries.")
	body := func(s *Schema) Parameter { return Parameter{Name: "body", In: "body", Required: true, Schema: s} }
	tags := []string{"tenants"}

	paths["/config/ai/apikey"] = PathItem{
		"post": {
			Tags: tags, Summary: "Create an API key", OperationID: "postAIAPIKey", Consumes: []string{mimeJSON},
			Description: "Creates a key for tenant_id. The answer carries raw_key (lxb_…) exactly once; the gateway " +
				"stores only a salted hash. Limits are optional (absent: no limit; present: ≥ 1); burst_size defaults " +
				"to rate_limit_rps. key_id + key_hash import a key minted offline (`infergate apikey mint`).",
			Parameters: []Parameter{body(spec)},
			Responses: map[string]*Response{"201": {Description: "Created; raw_key is shown only here.", Schema: created},
				"400": bad,
				"409": fail("An import (key_id + key_hash) of an id that exists: apikey_exists when tenant, name and hash match "+
					"(an idempotent re-apply), apikey_conflict when they differ; revision_conflict when another replica "+
					"wrote the shared key store first (retry).", errorExample{409,
					"a key with id 0123456789abcdef exists", "key exists", "apikey_exists", "key_id"}),
				"500": internal},
		},
		"get": {
			Tags: tags, Summary: "List API keys (never key material)", OperationID: "getAIAPIKeys",
			Parameters: []Parameter{tenantQ},
			Responses:  map[string]*Response{"200": {Description: "Keys, by tenant then name.", Schema: list}},
		},
	}
	paths["/config/ai/apikey/{key_id}"] = PathItem{
		"get": {
			Tags: tags, Summary: "Get one API key", OperationID: "getAIAPIKey", Parameters: []Parameter{keyID},
			Responses: map[string]*Response{"200": {Description: "The key.", Schema: view}, "404": missing},
		},
		"patch": {
			Tags: tags, Summary: "Change a key's allow-list, limits, enabled flag or expiry", OperationID: "patchAIAPIKey",
			Consumes: []string{mimeJSON}, Parameters: []Parameter{keyID, body(patch)},
			Responses: map[string]*Response{"200": {Description: "The key after the change.", Schema: view},
				"400": bad, "404": missing, "500": internal},
		},
		"delete": {
			Tags: tags, Summary: "Delete an API key (it stops working at once)", OperationID: "deleteAIAPIKey",
			Parameters: []Parameter{keyID},
			Responses:  map[string]*Response{"204": {Description: "Deleted."}, "404": missing, "500": internal},
		},
	}
	paths["/config/ai/apikey/{key_id}/usage"] = PathItem{
		"get": {
			Tags: tags, Summary: "A key's usage since the gateway started", OperationID: "getAIAPIKeyUsage",
			Parameters: []Parameter{keyID},
			Responses:  map[string]*Response{"200": {Description: "Requests, rejections and tokens.", Schema: usage}, "404": missing},
		},
	}
	paths["/config/ai/tenant/ratelimit"] = PathItem{
		"post": {
			Tags: tags, Summary: "Set a tenant's ceilings over all its keys", OperationID: "postAITenantRateLimit",
			Consumes: []string{mimeJSON}, Parameters: []Parameter{body(limit)},
			Responses: map[string]*Response{"200": {Description: "The tenant's ceilings.", Schema: limit}, "400": bad, "500": internal},
		},
		"get": {
			Tags: tags, Summary: "List tenant ceilings", OperationID: "getAITenantRateLimits", Parameters: []Parameter{tenantQ},
			Responses: map[string]*Response{"200": {Description: "Tenant ceilings.", Schema: limits}},
		},
	}
	paths["/config/ai/tenant/ratelimit/{tenant_id}"] = PathItem{
		"get": {
			Tags: tags, Summary: "One tenant's ceilings (LoxiLB's path)", OperationID: "getAITenantRateLimit",
			Parameters: []Parameter{pathParam("tenant_id", "The tenant.")},
			Responses: map[string]*Response{"200": {Description: "The tenant's ceilings.", Schema: limit},
				"404": fail("The tenant has no ceilings.", errorExample{404, "tenant t has no limits", "tenant not found", "tenant_not_found", "tenant_id"})},
		},
		"delete": {
			Tags: tags, Summary: "Remove a tenant's ceilings (infergate; its keys keep their own limits)", OperationID: "deleteAITenantRateLimit",
			Parameters: []Parameter{pathParam("tenant_id", "The tenant.")},
			Responses: map[string]*Response{"204": {Description: "Deleted."},
				"404": fail("The tenant has no ceilings.", errorExample{404, "tenant t has no limits", "tenant not found", "tenant_not_found", "tenant_id"}),
				"500": internal},
		},
	}
}
