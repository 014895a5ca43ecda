package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/infergate/infergate/buildinfo"
	"github.com/spf13/cobra"
)

// versionProbeTimeout bounds the server half of `version`: the client's
// own version must print promptly even when --server points nowhere.
const versionProbeTimeout = 3 * time.Second

// versionReport is `version -o json`.
type versionReport struct {
	Client buildinfo.Info  `json:"client"`
	Server *buildinfo.Info `json:"server,omitempty"`
	// ServerError says why the server's version is missing.
	ServerError string `json:"serverError,omitempty"`
}

func newVersionCmd(g *globals) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version and, when --server answers, the gateway's",
		Long: `version prints the client's version, commit and Go toolchain, then asks --server
(GET /version) for the gateway's. An unreachable server is reported, not an error:
exit code 0 either way. -o json prints {"client":…, "server":…}.`,
		Args: exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			switch g.output {
			case "", outTable, outJSON:
			default:
				return usagef("-o %q is not an output format for version (want table|json)", g.output)
			}
			rep := versionReport{Client: buildinfo.Get()}
			if !clientOnly {
				c, err := g.client()
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), min(g.timeout, versionProbeTimeout))
				defer cancel()
				if bi, err := c.Version(ctx); err != nil {
					rep.ServerError = err.Error()
				} else {
					rep.Server = &bi
				}
			}
			if g.output == outJSON {
				enc := json.NewEncoder(g.env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			fmt.Fprintf(g.env.Stdout, "client: %s\n", rep.Client)
			switch {
			case rep.Server != nil:
				fmt.Fprintf(g.env.Stdout, "server: %s (%s)\n", rep.Server, g.server)
			case rep.ServerError != "":
				fmt.Fprintf(g.env.Stdout, "server: not reachable at %s: %s\n", g.server, rep.ServerError)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print only the client's version (no request)")
	return cmd
}
