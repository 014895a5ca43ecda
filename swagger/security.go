package swagger

import "net/http"

// securityBearer names the management API token scheme. Swagger 2.0 has no
// bearer type, so it is an API key in the Authorization header whose value
// is "Bearer <token>" (the description says so, the UI shows it).
const securityBearer = "bearerToken"

func securityDefinitions() map[string]SecurityScheme {
	return map[string]SecurityScheme{securityBearer: {
		Type: "apiKey", In: "header", Name: "Authorization",
		Description: "Management API token from the gateway's --api-token-file, entered as " +
			"`Bearer <token>`. rw: tokens may call everything, ro: tokens only reads and explain. " +
			"A gateway without a token file (loopback only) needs none.",
	}}
}

// openOperation marks op as needing no credential.
func openOperation(op *Operation) {
	none := []SecurityRequirement{}
	op.Security = &none
}

// addAuthResponses documents the access-control refusals on every
// operation that needs a token.
func addAuthResponses(paths map[string]PathItem, fail func(string, errorExample) *Response) {
	unauthorized := fail("No bearer token, or one the gateway's token file does not hold.", errorExample{
		http.StatusUnauthorized, "this API needs a bearer token: send \"Authorization: Bearer <token>\"",
		"Unauthorized", "unauthorized", ""})
	unauthorized.Headers = map[string]Header{"WWW-Authenticate": {Type: "string", Description: `Bearer realm="infergate"`}}
	forbidden := fail("A read-only token on a change, or a Host that is not this API (DNS rebinding defence).",
		errorExample{http.StatusForbidden, "this token is read-only; changing rules needs a read-write (rw:) token",
			"Forbidden", "token_read_only", ""})
	for _, item := range paths {
		for _, op := range item {
			if op.Security != nil && len(*op.Security) == 0 {
				continue
			}
			if op.Responses["401"] == nil {
				op.Responses["401"] = unauthorized
			}
			if op.Responses["403"] == nil {
				op.Responses["403"] = forbidden
			}
		}
	}
}
