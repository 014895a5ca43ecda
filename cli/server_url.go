package cli

import (
	"strings"

	"github.com/infergate/infergate/api/client"
)

// withDefaultScheme completes a --server given as host:port (how loxicmd's
// -s/-p and most operators write an address) into a URL: https when TLS
// files for the management API are given, http otherwise. A value with a
// scheme is returned unchanged.
func withDefaultScheme(server string, tls client.TLSOptions) string {
	if server == "" || strings.Contains(server, "://") {
		return server
	}
	if tls.Enabled() {
		return "https://" + server
	}
	return "http://" + server
}
