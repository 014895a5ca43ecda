package cli

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/api/client"
)

// apiToken picks the bearer token, first found wins: --token, --token-file,
// INFERGATE_TOKEN, INFERGATE_TOKEN_FILE. None is not an error: a loopback
// gateway without a token file needs none.
func (g *globals) apiToken() (auth.Token, error) {
	switch {
	case g.token != "":
		return auth.NewToken(strings.TrimSpace(g.token)), nil
	case g.tokenFile != "":
		t, err := auth.ReadClientToken(g.tokenFile)
		if err != nil {
			return auth.Token{}, usagef("--token-file: %v", err)
		}
		return t, nil
	}
	if v := strings.TrimSpace(g.env.Getenv(envToken)); v != "" {
		return auth.NewToken(v), nil
	}
	if p := g.env.Getenv(envTokenFile); p != "" {
		t, err := auth.ReadClientToken(p)
		if err != nil {
			return auth.Token{}, fmt.Errorf("%s: %w", envTokenFile, err)
		}
		return t, nil
	}
	return auth.Token{}, nil
}

// printAuthHint tells a person what to do about a refused credential; the
// error_code line above it is for scripts.
func printAuthHint(w io.Writer, ae *client.APIError) {
	var hint string
	switch {
	case ae.ErrorCode == auth.CodeHostNotAllowed:
		hint = "the gateway does not answer to the host name in --server; use its IP address " +
			"(e.g. http://127.0.0.1:11111) or start it with --api-allowed-host <name>"
	case ae.ErrorCode == auth.CodeReadOnlyToken:
		hint = "your token is read-only (ro: in the gateway's --api-token-file); " +
			"changing rules needs a read-write token (rw:)"
	case ae.Status == http.StatusUnauthorized:
		hint = "the gateway needs a management API token: put one line of its --api-token-file " +
			"in a file and pass --token-file FILE (or set " + envToken + " / " + envTokenFile + "); " +
			"if you already did, the token is wrong or was rotated out"
	default:
		return
	}
	fmt.Fprintf(w, "  hint:       %s\n", hint)
}
