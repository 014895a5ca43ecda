package swagger

import (
	"encoding/json"
	"reflect"
)

// explainExample is a documented POST …/explain body.
const explainExample = `{
  "path": "/v1/chat/completions",
  "headers": {"X-Conversation-Id": "c-42"},
  "body": {"model": "m", "messages": [{"role": "system", "content": "You are a careful assistant."}, {"role": "user", "content": "hi"}]}
}`

// addExplainPaths documents the routing explanation of one rule. The
// response schema is reflected from v.Explanation when the api package
// passes one (the datapath's view), else it is a free-form object.
func addExplainPaths(g *generator, v Views, paths map[string]PathItem, internal *Response) {
	resp := &Schema{Type: "object", Description: "The datapath's explanation: each ladder tier's outcome " +
		"(tier, hit, reason, choice), the chosen prefill/decode or endpoint, Tier 1 match rate " +
		"(matched_bytes, key_bytes, match_rate, threshold_percent), Tier 1.5 scores and candidate loads."}
	if v.Explanation != nil {
		resp = g.ref(reflect.TypeOf(v.Explanation))
	}
	req := &Schema{
		Type: "object",
		Description: "The client request to explain. Either this envelope, or the client's JSON body alone " +
			"(then path is /v1/chat/completions and there are no headers).",
		Properties: map[string]*Schema{
			"path":    {Type: "string", Description: "Client request path.", Default: "/v1/chat/completions"},
			"headers": {Type: "object", Description: "Client request headers (X-Conversation-Id, X-Model, ...).", AdditionalProperties: &Schema{Type: "string"}},
			"body":    {Type: "object", Description: "The client's JSON request body, verbatim."},
		},
		Required: []string{"body"},
		Example:  json.RawMessage(explainExample),
	}
	errs := g.ref(reflect.TypeOf(v.Error))
	fail := func(desc string, ex errorExample) *Response {
		return &Response{Description: desc, Schema: errs, Examples: map[string]interface{}{mimeJSON: ex}}
	}
	params := []Parameter{
		pathParam("ip", "Virtual IP; IPv6 may be bracketed ([2001:db8::1])."),
		pathParamInt("port", "Service port."),
		pathParamEnum("proto", "L4 protocol.", "tcp", "udp", "sctp", "icmp"),
		{Name: "body", In: "body", Required: true, Description: "The client request.", Schema: req},
		queryParam("block", "integer", "Rule mark (block), to pick one of several rules on this VIP:port."),
		queryParam("path_prefix", "string", "Path of the rule."),
		queryParam("path_match_mode", "string", "Path match mode of the rule (disabled, prefix, exact)."),
		queryParam("model_name", "string", "Model name of the rule."),
	}
	paths["/config/loadbalancer/externalipaddress/{ip}/port/{port}/protocol/{proto}/explain"] = PathItem{
		"post": {
			Tags: []string{"ai"}, Summary: "Explain where a request would be routed, and why", OperationID: "postLoadbalancerExplain",
			Description: "Runs the rule's routing decision for the given client request without sending it and without " +
				"side effects (no session pin, nothing learned by the prefix index): which tier would pick which " +
				"endpoint and why it fell through otherwise (no_key, below_threshold, load_guard, empty, " +
				"pinned_endpoint_excluded, ...), match rates, KV scores and loads.",
			Consumes:   []string{mimeJSON},
			Parameters: params,
			Responses: map[string]*Response{
				"200": {Description: "The explanation.", Schema: resp},
				"400": fail("Malformed envelope or client body.", errorExample{400,
					"body must be the client request's JSON body", "malformed arguments", "invalid_field", "body"}),
				"404": fail("No rule on this VIP, port and protocol.", errorExample{404,
					"no rule on 127.0.0.50:2020/tcp", "no-rule error", "rule_not_found", ""}),
				"415": fail("Content-Type is not application/json.", errorExample{415,
					`rule bodies must be sent with Content-Type: application/json, got "text/plain"`,
					"Unsupported media type", "unsupported_media_type", "Content-Type"}),
				"500": internal,
				"501": fail("The daemon's runtime cannot explain (no datapath).", errorExample{501,
					"this daemon's runtime cannot explain routing decisions", "not available", "not_available", ""}),
			},
		},
	}
}
