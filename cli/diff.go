package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newDiffCmd is `infergate diff -f FILE`: what `apply -f` would change,
// rule by rule and field by field, without changing anything.
func newDiffCmd(g *globals) *cobra.Command {
	f := &fileFlags{}
	cmd := &cobra.Command{
		Use:   "diff -f <file|dir>",
		Short: "Show what `apply -f` would change (created, updated fields, unchanged) without changing anything",
		Long: `diff reads the server's rules once and compares every kind: Loadbalancer document
of the files with the rule of the same key, defaults resolved as the server resolves
them: "would be created", "unchanged", or "would be updated" with one
"~ <field>: <old> → <new>" line per changed field. ApiKey and TenantLimit documents
are listed as not compared. Exit code 0 whether or not something would change.`,
		Args: exactArgs(0, "none; use -f"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			docs, err := f.load()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			all, err := c.List(cmd.Context())
			if err != nil {
				return err
			}
			for _, d := range docs {
				ref := d.Source + " " + d.ref()
				if d.key != nil || d.limit != nil {
					fmt.Fprintf(g.env.Stdout, "%s: not compared (diff covers kind: Loadbalancer)\n", ref)
					continue
				}
				plan := changeAgainst(all, d.Rule)
				warnSameName(g.env.Stderr, d.Rule.ServiceArguments.Name, plan)
				writeDiff(g.env.Stdout, ref, plan)
			}
			return nil
		}),
	}
	cmd.Flags().StringVarP(&f.path, "file", "f", "", "YAML rule file or directory")
	return cmd
}
