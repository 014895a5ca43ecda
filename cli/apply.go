package cli

import (
	"errors"
	"fmt"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/rules"
	"github.com/spf13/cobra"
)

// fileFlags is -f of apply and delete.
type fileFlags struct {
	path           string
	ignoreNotFound bool
	lbConfig       string // apply --lb: a LoxiLB lbconfig.txt (lbconfig.go)
}

func (f *fileFlags) load() ([]fileDoc, error) {
	if f.path == "" {
		return nil, usagef("-f <file|dir> is required")
	}
	docs, err := rules.LoadFiles(f.path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", f.path, err)
	}
	out, err := decodeDocs(docs)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", f.path, err)
	}
	return out, nil
}

// isRejection reports whether err is an answer from the server (which is
// about one rule) rather than a transport failure (which is about all).
func isRejection(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae)
}

func newApplyCmd(g *globals) *cobra.Command {
	f := &fileFlags{}
	cmd := &cobra.Command{
		Use:   "apply -f <file|dir> | apply --lb <lbconfig.txt>",
		Short: "Create or update every rule (kind: Loadbalancer) and API key (kind: ApiKey, TenantLimit) of YAML files (idempotent)",
		Long: `Applies every kind: Loadbalancer document of a file, or of every *.yaml/*.yml
in a directory (sorted), and prints "<source> <vip>:<port>/<proto> created|updated (fields: …)|unchanged"
per rule. kind: ApiKey documents (as "infergate apikey mint" prints them: key_id and
key_hash, never the raw key) and kind: TenantLimit documents may be mixed in; they print
"<source> ApiKey <tenant>/<name> (<key_id>) created|updated|unchanged". A rule the server rejects is reported with the server's message and the
command exits 1 after trying the rest; a file that does not parse applies nothing.`,
		Args: exactArgs(0, "none; use -f"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if f.lbConfig != "" {
				if f.path != "" {
					return usagef("give -f or --lb, not both")
				}
				return applyLBConfig(cmd, g, f.lbConfig)
			}
			docs, err := f.load()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			// The rule set as it was, to name the fields an update changes.
			before, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			rejected := 0
			for _, d := range docs {
				res, err := applyDoc(cmd.Context(), c, d)
				if err == nil && d.IsRule() {
					res = changeAgainst(before, d.Rule).summary(res)
				}
				if err != nil && !isDocRejection(err) {
					// The server is unreachable or broken: trying the
					// remaining documents would only repeat the same error.
					return fmt.Errorf("%s %s: %w", d.Source, d.ref(), err)
				}
				if err != nil {
					rejected++
					fmt.Fprintf(g.env.Stderr, "%s %s rejected:\n", d.Source, d.ref())
					printError(g.env.Stderr, err)
					continue
				}
				fmt.Fprintf(g.env.Stdout, "%s %s %s\n", d.Source, d.ref(), res)
			}
			if rejected > 0 {
				return failure{err: fmt.Errorf("%d of %d documents not applied", rejected, len(docs))}
			}
			return nil
		}),
	}
	cmd.Flags().StringVarP(&f.path, "file", "f", "", "YAML rule file or directory")
	cmd.Flags().StringVar(&f.lbConfig, "lb", "", "LoxiLB saved config (lbconfig.txt) to re-apply (loxicmd apply --lb)")
	return cmd
}

// deleteFiles deletes every rule of the files by its full key (host, block,
// path and model included, unlike loxicmd which sends VIP:port only).
func deleteFiles(cmd *cobra.Command, g *globals, f *fileFlags) error {
	docs, err := f.load()
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	failed := 0
	for _, d := range docs {
		err := deleteDoc(cmd.Context(), c, d)
		if err != nil && !isDocRejection(err) {
			return fmt.Errorf("%s %s: %w", d.Source, d.ref(), err)
		}
		switch {
		case err == nil:
			fmt.Fprintf(g.env.Stdout, "%s %s deleted\n", d.Source, d.ref())
		case f.ignoreNotFound && client.IsNotFound(err):
			fmt.Fprintf(g.env.Stdout, "%s %s not found\n", d.Source, d.ref())
		default:
			failed++
			fmt.Fprintf(g.env.Stderr, "%s %s not deleted:\n", d.Source, d.ref())
			printError(g.env.Stderr, err)
		}
	}
	if failed > 0 {
		return failure{err: fmt.Errorf("%d of %d documents not deleted", failed, len(docs))}
	}
	return nil
}
