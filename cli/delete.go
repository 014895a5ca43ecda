package cli

import (
	"fmt"

	"github.com/infergate/infergate/api/client"
	"github.com/spf13/cobra"
)

type deleteFlags struct {
	tcp, name                          string
	host, pathPrefix, pathMatch, model string
	mark                               uint32
}

func newDeleteCmd(g *globals) *cobra.Command {
	files := &fileFlags{}
	del := &cobra.Command{
		Use:   "delete (lb … | -f <file|dir>)",
		Short: "Delete rules by key, by name, or every rule of YAML files",
		Args:  cobra.ArbitraryArgs,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			if files.path == "" {
				return usagef("delete needs a subcommand (lb) or -f <file|dir>")
			}
			return deleteFiles(cmd, g, files)
		}),
	}
	del.Flags().StringVarP(&files.path, "file", "f", "", "YAML rule file or directory whose rules to delete")
	del.Flags().BoolVar(&files.ignoreNotFound, "ignore-not-found", false, "with -f: a rule that does not exist is not an error")

	f := &deleteFlags{}
	lb := &cobra.Command{
		Use:     "lb (<VIP> --tcp=<port> | --name=<name>)",
		Aliases: []string{"loadbalancer"},
		Short:   "Delete one rule by its full key, or every rule with a name",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("delete lb takes at most one VIP, got %d arguments", len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			switch {
			case len(args) == 1 && f.name != "":
				return usagef("give either <VIP> --tcp=<port> or --name, not both")
			case f.name != "":
				if err := c.DeleteByName(cmd.Context(), f.name); err != nil {
					return err
				}
			case len(args) == 1:
				if f.tcp == "" {
					return usagef("delete lb <VIP> needs --tcp=<port>")
				}
				ps, err := parsePortSpec(f.tcp)
				if err != nil {
					return err
				}
				k := client.Key{VIP: args[0], Port: ps.port, PortMax: ps.portMax, Protocol: protoTCP,
					Block: f.mark, Host: f.host, PathPrefix: f.pathPrefix, PathMatchMode: f.pathMatch, ModelName: f.model}
				if err := c.Delete(cmd.Context(), k); err != nil {
					return err
				}
			default:
				return usagef("delete lb needs <VIP> --tcp=<port> or --name=<name>")
			}
			fmt.Fprintln(g.env.Stdout, "Success")
			return nil
		}),
	}
	fl := lb.Flags()
	fl.StringVar(&f.tcp, "tcp", "", "service port: <port>[-<portmax>]")
	fl.StringVar(&f.name, "name", "", "delete every rule with this name")
	fl.StringVar(&f.host, "host", "", "L7 host key of the rule")
	fl.Uint32Var(&f.mark, "mark", 0, "rule mark (block)")
	fl.StringVar(&f.pathPrefix, "path-prefix", "", "L7 path key of the rule")
	fl.StringVar(&f.pathMatch, "path-match-mode", "", "path match mode of the rule")
	fl.StringVar(&f.model, "model-name", "", "model key of the rule")
	fl.Bool("bgp", false, "accepted for loxicmd's command lines (there is no BGP export)")
	del.AddCommand(lb)
	del.AddCommand(newDeleteAPIKeyCmd(g))
	return del
}
