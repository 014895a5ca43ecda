package swagger

import "reflect"

// addSNIPaths documents LoxiLB's SNI certificate store.
func addSNIPaths(g *generator, v Views, paths map[string]PathItem, internal, notReady *Response, fail func(string, errorExample) *Response) {
	if v.SNIList == nil {
		return
	}
	list := g.ref(reflect.TypeOf(v.SNIList))
	entry := g.ref(reflect.TypeOf(v.SNIEntry))
	result := g.ref(reflect.TypeOf(v.SNIResult))
	bad := fail("The hostname is invalid or its certificate does not load (the message names the file and reason).", errorExample{400,
		"certificate cannot be used: hostname api.example.com: /var/lib/infergate/cert/api.example.com/server.crt: certificate expired at 2026-01-01T00:00:00Z",
		"certificate cannot be used: hostname api.example.com: /var/lib/infergate/cert/api.example.com/server.crt: certificate expired at 2026-01-01T00:00:00Z",
		"invalid_field", "certPath"})
	body := Parameter{Name: "body", In: "body", Required: true, Schema: entry,
		Description: "hostname, and optionally certPath (a directory with server.crt, server.key and optional rootCA.crt; default <cert-root>/<hostname>)."}
	paths["/sni/certificates"] = PathItem{
		"get": {
			Tags: []string{"tls"}, Summary: "List SNI certificates", OperationID: "getSNICertificates",
			Description: "Every certificate loaded (registered here or named by a rule's host), with the rules using it " +
				"(refCount), its subject, issuer, serial and expiry. Never key material.",
			Responses: map[string]*Response{"200": {Description: "The SNI store.", Schema: list}, "500": internal},
		},
		"post": {
			Tags: []string{"tls"}, Summary: "Register an SNI certificate", OperationID: "postSNICertificate",
			Consumes: []string{mimeJSON}, Parameters: []Parameter{body},
			Responses: map[string]*Response{"200": {Description: "Loaded.", Schema: result}, "400": bad, "500": internal, "503": notReady},
		},
		"delete": {
			Tags: []string{"tls"}, Summary: "Remove an SNI certificate", OperationID: "deleteSNICertificate",
			Consumes: []string{mimeJSON}, Parameters: []Parameter{body},
			Responses: map[string]*Response{"200": {Description: "Removed.", Schema: result}, "400": bad,
				"404": fail("Not registered.", errorExample{404, "hostname is not in the SNI store", "hostname is not in the SNI store", "rule_not_found", ""}),
				"409": fail("Still used by rules.", errorExample{409, "the certificate is in use by rules; delete them first",
					"the certificate is in use by rules; delete them first", "invalid_combination", "hostname"}),
				"500": internal, "503": notReady},
		},
	}
}
