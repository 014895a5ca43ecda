package swagger

import (
	"reflect"
	"strings"

	"github.com/infergate/infergate/rules"
)

// BasePath is the document's base path (LoxiLB's).
const BasePath = "/netlox/v1"

const mimeJSON = "application/json"

// Views are the API's response types; their schemas are reflected from zero
// values the api package passes in (swagger cannot import api).
type Views struct {
	Result   interface{} // success envelope
	Error    interface{} // error envelope
	Compiled interface{} // GET …/compiled
	Status   interface{} // GET …/status
	// KVInventory is GET /config/ai/kv/inventory (nil: not documented).
	KVInventory interface{}
	// Explanation is POST …/explain's answer (nil: a free-form object).
	Explanation interface{}
	// SNI certificate store (nil: not documented).
	SNIList, SNIEntry, SNIResult interface{}
	// Version is GET /version, Replicas GET /replicas (ops.go; nil: not documented).
	Version, Replicas interface{}
}

// Document builds the OpenAPI 2.0 document.
func Document(v Views) *Doc {
	g := newGenerator(wireNames(), fieldNotes())
	return buildDocument(g, v)
}

func buildDocument(g *generator, v Views) *Doc {
	entry := g.ref(reflect.TypeOf(rules.Rule{}))
	list := g.ref(reflect.TypeOf(rules.RuleList{}))
	result := g.ref(reflect.TypeOf(v.Result))
	errs := g.ref(reflect.TypeOf(v.Error))
	compiled := g.ref(reflect.TypeOf(v.Compiled))
	status := g.ref(reflect.TypeOf(v.Status))

	examples := Examples()
	named := map[string]interface{}{}
	for _, ex := range examples {
		named[ex.Name] = ex.Body
	}
	// Swagger UI pre-fills the body from the schema's example.
	g.defs[defEntry].Example = examples[0].Body

	ok := func(desc string, s *Schema) *Response { return &Response{Description: desc, Schema: s} }
	success := &Response{Description: "Success", Schema: result,
		Examples: map[string]interface{}{mimeJSON: map[string]string{"result": "Success"}}}
	fail := func(desc string, ex errorExample) *Response {
		return &Response{Description: desc, Schema: errs, Examples: map[string]interface{}{mimeJSON: ex}}
	}
	notReady := fail("Boot replay still running; retry after the given seconds.", errorExample{503,
		"configuration writes are rejected until the boot config replay settles", "Maintenance mode", "not_ready", ""})
	notReady.Headers = map[string]Header{"Retry-After": {Type: "integer", Description: "seconds"}}
	internal := fail("Unexpected failure (logged by the gateway).", errorExample{500,
		"internal error; see the gateway log", "internal error; see the gateway log", "internal", ""})
	notFound := func(desc string) *Response {
		return fail(desc, errorExample{404, "no rule on 127.0.0.50:2020/tcp", "no-rule error", "rule_not_found", ""})
	}

	keyParams := []Parameter{
		pathParam("ip", "Virtual IP; IPv6 may be bracketed ([2001:db8::1])."),
		pathParamInt("port", "Service port."),
		pathParamEnum("proto", "L4 protocol.", "tcp", "udp", "sctp", "icmp"),
	}
	rangeParams := []Parameter{keyParams[0], keyParams[1], pathParamInt("portmax", "End of the port range."), keyParams[2]}
	hostParam := pathParam("hosturl", "HTTP host of the rule; \"any\" means no host.")
	keyQuery := []Parameter{
		queryParam("block", "integer", "Rule mark (block)."),
		queryParam("path_prefix", "string", "Path of the rule."),
		queryParam("path_match_mode", "string", "Path match mode of the rule (disabled, prefix, exact)."),
		queryParam("model_name", "string", "Model name of the rule."),
		queryParam("bgp", "boolean", "Accepted for loxicmd compatibility; ignored."),
	}
	writeResponses := func(extra map[string]*Response) map[string]*Response {
		r := map[string]*Response{
			"200": success,
			"400": fail("Malformed request or invalid field (see error_code and field).", errorExample{400,
				`unknown field "serviceArguments.pdDisaggMode"; did you mean "pd_disagg_mode"? (letter case does not matter, underscores do)`,
				`unknown field "serviceArguments.pdDisaggMode"; did you mean "pd_disagg_mode"? (letter case does not matter, underscores do)`,
				"unknown_field", "serviceArguments.pdDisaggMode"}),
			"500": internal,
			"503": notReady,
		}
		for k, v := range extra {
			r[k] = v
		}
		return r
	}
	deleteByKey := func(id, summary string, params []Parameter) *Operation {
		return &Operation{
			Tags: []string{"loadbalancer"}, Summary: summary, OperationID: id,
			Description: "Deletes the rule with exactly this composite key; the query parameters complete it.",
			Parameters:  append(append([]Parameter{}, params...), keyQuery...),
			Responses:   writeResponses(map[string]*Response{"404": notFound("No rule with this key.")}),
		}
	}
	readResponses := func(desc string, s *Schema) map[string]*Response {
		return map[string]*Response{
			"200": ok(desc, s),
			"400": fail("Malformed path parameter.", errorExample{400,
				`path parameter ip must be an IPv4 or IPv6 address, got "nope"`, "malformed-service error", "invalid_field", "ip"}),
			"404": notFound("No rule on this VIP, port and protocol."),
			"500": internal,
		}
	}

	lbKey := "/config/loadbalancer/externalipaddress/{ip}/port/{port}/protocol/{proto}"
	lbRange := "/config/loadbalancer/externalipaddress/{ip}/port/{port}/portmax/{portmax}/protocol/{proto}"
	paths := map[string]PathItem{
		"/config/loadbalancer": {
			"post": {
				Tags: []string{"loadbalancer"}, Summary: "Create or update a rule (upsert)", OperationID: "postLoadbalancer",
				Description: "A new key creates the rule; a changed rule with an existing key is updated in place; " +
					"re-posting an identical rule is 409 rule_exists. Keys match in any letter case; misspelled keys are 400 unknown_field, LoxiLB fields not served 400 unsupported.",
				Consumes:   []string{mimeJSON},
				Parameters: []Parameter{{Name: "body", In: "body", Required: true, Description: "The rule.", Schema: entry}},
				Responses: writeResponses(map[string]*Response{
					"409": fail("Identical rule exists, or an immutable field changed.", errorExample{409,
						"an identical rule already exists for this key", "lbrule-exists error", "rule_exists", ""}),
					"413": fail("Body larger than 1 MiB.", errorExample{413,
						"request body exceeds 1048576 bytes", "Request entity too large", "body_too_large", ""}),
					"415": fail("Content-Type is not application/json.", errorExample{415,
						`rule bodies must be sent with Content-Type: application/json, got "text/plain"`,
						"Unsupported media type", "unsupported_media_type", "Content-Type"}),
				}),
				Examples: named,
			},
		},
		"/config/loadbalancer/all": {
			"get": {
				Tags: []string{"loadbalancer"}, Summary: "List every rule", OperationID: "getLoadbalancerAll",
				Parameters: []Parameter{queryParam("projectId", "string", "Only rules with this projectId.")},
				Responses:  map[string]*Response{"200": ok("Every rule, with runtime status.", list), "500": internal},
			},
			"delete": {
				Tags: []string{"loadbalancer"}, Summary: "Delete every rule", OperationID: "deleteLoadbalancerAll",
				Responses: map[string]*Response{"200": success, "500": internal, "503": notReady},
			},
		},
		lbKey: {
			"get": {
				Tags: []string{"loadbalancer"}, Summary: "Get the first rule on VIP, port and protocol", OperationID: "getLoadbalancer",
				Parameters: keyParams, Responses: readResponses("The rule, with runtime status.", entry),
			},
			"delete": deleteByKey("deleteLoadbalancer", "Delete a rule by key", keyParams),
		},
		lbKey + "/compiled": {
			"get": {
				Tags: []string{"loadbalancer"}, Summary: "Get the effective compiled rule", OperationID: "getLoadbalancerCompiled",
				Description: "Every default resolved; durations in seconds.",
				Parameters:  keyParams, Responses: readResponses("The compiled rule.", compiled),
			},
		},
		lbKey + "/status": {
			"get": {
				Tags: []string{"loadbalancer"}, Summary: "Get a rule's runtime status", OperationID: "getLoadbalancerStatus",
				Parameters: keyParams, Responses: readResponses("Readiness and per-endpoint state.", status),
			},
		},
		lbRange: {
			"delete": deleteByKey("deleteLoadbalancerPortRange", "Delete a port-range rule by key", rangeParams),
		},
		"/config/loadbalancer/hosturl/{hosturl}/externalipaddress/{ip}/port/{port}/protocol/{proto}": {
			"delete": deleteByKey("deleteLoadbalancerHost", "Delete a host rule by key", append([]Parameter{hostParam}, keyParams...)),
		},
		"/config/loadbalancer/hosturl/{hosturl}/externalipaddress/{ip}/port/{port}/portmax/{portmax}/protocol/{proto}": {
			"delete": deleteByKey("deleteLoadbalancerHostPortRange", "Delete a host port-range rule by key",
				append([]Parameter{hostParam}, rangeParams...)),
		},
		"/config/loadbalancer/name/{name}": {
			"delete": {
				Tags: []string{"loadbalancer"}, Summary: "Delete every rule with this name", OperationID: "deleteLoadbalancerByName",
				Description: "404 rule_not_found when no rule has the name, as for a missing key (LoxiLB answers Success there).",
				Parameters:  []Parameter{pathParam("name", "Rule name.")},
				Responses:   map[string]*Response{"200": success, "404": notFound("No rule has this name."), "500": internal, "503": notReady},
			},
		},
		"/metrics": {
			"get": {
				Tags: []string{"operations"}, Summary: "Prometheus metrics", OperationID: "getMetrics",
				Produces:  []string{"text/plain"},
				Responses: map[string]*Response{"200": {Description: "Prometheus text exposition."}},
			},
		},
		"/swagger.json": {
			"get": {
				Tags: []string{"operations"}, Summary: "This OpenAPI document", OperationID: "getSwagger",
				Responses: map[string]*Response{"200": {Description: "OpenAPI 2.0 document."}},
			},
		},
		"/docs": {
			"get": {
				Tags: []string{"operations"}, Summary: "Swagger UI", OperationID: "getDocs",
				Produces:  []string{"text/html"},
				Responses: map[string]*Response{"200": {Description: "The Swagger UI page."}},
			},
		},
	}
	addKVPaths(g, v, paths, internal)
	addExplainPaths(g, v, paths, internal)
	addTenantPaths(g, paths, errs, internal)
	addSNIPaths(g, v, paths, internal, notReady, fail)
	addOpsPaths(g, v, paths, internal)
	openOperation(paths["/swagger.json"]["get"])
	openOperation(paths["/docs"]["get"])
	paths["/metrics"]["get"].Description = "Needs a token when the gateway has a token file, unless it runs with --api-open-metrics."
	addAuthResponses(paths, fail)
	return &Doc{
		Swagger: "2.0",
		Info: Info{
			Title:   "infergate management API",
			Version: "1.0",
			Description: "LoxiLB-compatible load-balancer rule API of infergate, an inference gateway for LLM " +
				"serving fleets. Errors are {code, message, result, error_code, field}; code equals the HTTP status.",
		},
		BasePath: BasePath,
		// No schemes: clients (Swagger UI) use the scheme the document was
		// fetched over, so the same document serves HTTP and HTTPS (--api-tls-cert).
		Consumes:            []string{mimeJSON},
		Produces:            []string{mimeJSON},
		Paths:               paths,
		Definitions:         g.defs,
		SecurityDefinitions: securityDefinitions(),
		Security:            []SecurityRequirement{{securityBearer: {}}},
		Tags: []Tag{
			{Name: "loadbalancer", Description: "Load-balancer rules"},
			{Name: "operations", Description: "Metrics and documentation"},
			{Name: "ai", Description: "Inference routing state (KV-exact inventory, routing explanation)"},
			{Name: "tenants", Description: "API keys, tenant ceilings and usage (enforced on rules with api_key_auth: required)"},
		},
	}
}

// errorExample is a documented error body (the api package's ErrorBody
// shape; TestErrorExamplesMatchErrorBody keeps the two in step).
type errorExample struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	Result    string `json:"result"`
	ErrorCode string `json:"error_code"`
	Field     string `json:"field,omitempty"`
}

func pathParam(name, desc string) Parameter {
	return Parameter{Name: name, In: "path", Required: true, Type: "string", Description: desc}
}

func pathParamInt(name, desc string) Parameter {
	return Parameter{Name: name, In: "path", Required: true, Type: "integer", Description: desc}
}

func pathParamEnum(name, desc string, vals ...string) Parameter {
	p := pathParam(name, desc)
	for _, v := range vals {
		p.Enum = append(p.Enum, v)
	}
	return p
}

func queryParam(name, typ, desc string) Parameter {
	return Parameter{Name: name, In: "query", Type: typ, Description: desc}
}

// Operations lists every documented "METHOD /full/path" (swagger template
// syntax, base path included), for route drift tests.
func Operations(d *Doc) []string {
	var out []string
	for p, item := range d.Paths {
		for m := range item {
			out = append(out, strings.ToUpper(m)+" "+d.BasePath+p)
		}
	}
	return out
}
