package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/infergate/infergate/tenant"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// keyFlags are the settings of `create apikey` and `update apikey`.
type keyFlags struct {
	tenantID, name, models, expires string
	rps, burst, tpm                 int
	disabled                        bool
	keyID, keyHash                  string
	maxPriority                     string
}

func (f *keyFlags) bind(cmd *cobra.Command, create bool) {
	fl := cmd.Flags()
	if create {
		fl.StringVar(&f.tenantID, "tenant", "", "tenant id (required)")
		fl.StringVar(&f.name, "name", "", "key name, unique in its tenant (required)")
		fl.StringVar(&f.keyID, "key-id", "", "import a key minted with 'infergate apikey mint': its key_id")
		fl.StringVar(&f.keyHash, "key-hash", "", "… and its key_hash (the secret never reaches the gateway)")
	}
	fl.StringVar(&f.models, "models", "", "allowed models, comma-separated (empty: any)")
	fl.IntVar(&f.rps, "rps", 0, "requests per second (omit for no limit)")
	fl.IntVar(&f.burst, "burst", 0, "request burst (default: --rps)")
	fl.IntVar(&f.tpm, "tpm", 0, "tokens per minute (omit for no limit)")
	fl.StringVar(&f.expires, "expires", "", "expiry, RFC 3339 (e.g. 2027-01-01T00:00:00Z)")
	fl.BoolVar(&f.disabled, "disabled", false, "create (or set) the key disabled")
	fl.StringVar(&f.maxPriority, "max-priority", "", "highest priority class its requests may ask for: low, standard or high (empty: the gateway's --flow-key-max-class)")
}

// intFlag is the flag's value when the user set it, else nil (no limit /
// unchanged), so an explicit 0 still reaches the server's validation.
func intFlag(cmd *cobra.Command, name string, v int) *int {
	if !cmd.Flags().Changed(name) {
		return nil
	}
	return &v
}

func (f *keyFlags) expiry() (*time.Time, error) {
	if f.expires == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, f.expires)
	if err != nil {
		return nil, usagef("--expires %q is not an RFC 3339 time: %v", f.expires, err)
	}
	return &t, nil
}

func splitModels(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

func newCreateAPIKeyCmd(g *globals) *cobra.Command {
	f := &keyFlags{}
	cmd := &cobra.Command{
		Use:   "apikey --tenant=<id> --name=<name>",
		Short: "Create a tenant API key (POST /netlox/v1/config/ai/apikey); prints the raw key once",
		Example: `  infergate create apikey --tenant=team-a --name=ci --models=llama-3-8b --rps=10 --tpm=100000
  curl -H "Authorization: Bearer lxb_…" http://127.0.0.10:8080/v1/completions -d @body.json`,
		Args: exactArgs(0, "none; use flags"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			exp, err := f.expiry()
			if err != nil {
				return err
			}
			s := tenant.KeySpec{TenantID: f.tenantID, Name: f.name, AllowedModels: splitModels(f.models),
				RateLimitRPS: intFlag(cmd, "rps", f.rps), BurstSize: intFlag(cmd, "burst", f.burst),
				TokensPerMin: intFlag(cmd, "tpm", f.tpm), ExpiresAt: exp, KeyID: f.keyID, KeyHash: f.keyHash, MaxPriority: f.maxPriority}
			if f.disabled {
				s.Enabled = new(false)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			c, err := cl.CreateAPIKey(cmd.Context(), s)
			if err != nil {
				return err
			}
			if g.output == outJSON {
				return printJSON(g, c)
			}
			fmt.Fprintf(g.env.Stdout, "key_id:  %s\ntenant:  %s\nname:    %s\n", c.KeyID, c.TenantID, c.Name)
			if c.RawKey != "" {
				fmt.Fprintf(g.env.Stdout, "raw_key: %s\n(shown once: the gateway keeps only its hash)\n", c.RawKey)
			}
			return nil
		}),
	}
	f.bind(cmd, true)
	return cmd
}

func newUpdateAPIKeyCmd(g *globals) *cobra.Command {
	f := &keyFlags{}
	var enable bool
	cmd := &cobra.Command{
		Use:   "apikey <key_id>",
		Short: "Change a key's allowed models, limits, expiry or enabled flag (PATCH)",
		Args:  exactArgs(1, "the key id"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			exp, err := f.expiry()
			if err != nil {
				return err
			}
			p := tenant.KeyPatch{RateLimitRPS: intFlag(cmd, "rps", f.rps), BurstSize: intFlag(cmd, "burst", f.burst),
				TokensPerMin: intFlag(cmd, "tpm", f.tpm), ExpiresAt: exp}
			if cmd.Flags().Changed("models") {
				m := splitModels(f.models)
				p.AllowedModels = &m
			}
			if cmd.Flags().Changed("max-priority") {
				p.MaxPriority = &f.maxPriority
			}
			switch {
			case cmd.Flags().Changed("disabled") && cmd.Flags().Changed("enable"):
				return usagef("--disabled and --enable are opposites; give one")
			case cmd.Flags().Changed("disabled"):
				p.Enabled = new(!f.disabled)
			case cmd.Flags().Changed("enable"):
				p.Enabled = new(enable)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			v, err := cl.PatchAPIKey(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			return printKeys(g, []tenant.KeyView{v})
		}),
	}
	f.bind(cmd, false)
	cmd.Flags().BoolVar(&enable, "enable", false, "enable the key")
	return cmd
}

func newGetAPIKeyCmd(g *globals) *cobra.Command {
	var tenantID string
	var usage bool
	cmd := &cobra.Command{
		Use:     "apikey [<key_id>]",
		Aliases: []string{"apikeys"},
		Short:   "List API keys (never key material), one key, or its usage (--usage)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("get apikey takes at most one key id")
			}
			if usage && len(args) == 0 {
				return usagef("--usage needs a key id")
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if usage {
				u, err := c.APIKeyUsage(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printJSON(g, u)
			}
			var keys []tenant.KeyView
			if len(args) == 1 {
				k, err := c.GetAPIKey(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				keys = []tenant.KeyView{k}
			} else {
				var err error
				if keys, err = c.ListAPIKeys(cmd.Context(), tenantID); err != nil {
					return err
				}
			}
			return printKeys(g, keys)
		}),
	}
	cmd.Flags().StringVar(&tenantID, "tenant", "", "only this tenant's keys")
	cmd.Flags().BoolVar(&usage, "usage", false, "show the key's usage counters")
	return cmd
}

func newDeleteAPIKeyCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "apikey <key_id>",
		Short: "Delete an API key (it stops working at once)",
		Args:  exactArgs(1, "the key id"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteAPIKey(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintln(g.env.Stdout, "Deleted")
			return nil
		}),
	}
}

// newAPIKeyCmd groups offline key tools.
func newAPIKeyCmd(g *globals) *cobra.Command {
	grp := groupCmd("apikey", "Offline API-key tools")
	var tenantID, name string
	mint := &cobra.Command{
		Use:   "mint",
		Short: "Make a new key offline: prints the raw key (give it to the client) and the hash to import",
		Long: `Prints a new raw key and a kind: ApiKey YAML document holding only its key_id and
key_hash, for GitOps: commit the YAML (add allowed_models and limits to its spec), hand the
raw key to the client, and apply it with the rules:
  infergate apply -f <file|dir>        (or serve --rules; idempotent)
or import it once with
  infergate create apikey --tenant=<t> --name=<n> --key-id=<id> --key-hash=<hash>`,
		Args: exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			m, err := tenant.Mint()
			if err != nil {
				return err
			}
			doc := map[string]any{"apiVersion": "infergate.io/v1", "kind": "ApiKey",
				"spec": map[string]any{"tenant_id": tenantID, "name": name, "key_id": m.ID, "key_hash": m.Hash.String()}}
			b, err := yaml.Marshal(doc)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.env.Stderr, "raw key (give to the client; not stored anywhere): %s\n", m.Raw.Reveal())
			_, err = g.env.Stdout.Write(b)
			return err
		}),
	}
	mint.Flags().StringVar(&tenantID, "tenant", "", "tenant id for the YAML")
	mint.Flags().StringVar(&name, "name", "", "key name for the YAML")
	grp.AddCommand(mint)
	return grp
}

func printJSON(g *globals, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(g.env.Stdout, "%s\n", b)
	return err
}

func printKeys(g *globals, keys []tenant.KeyView) error {
	switch g.output {
	case outJSON:
		return printJSON(g, keys)
	case outYAML:
		b, err := yaml.Marshal(keys)
		if err != nil {
			return err
		}
		_, err = g.env.Stdout.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(g.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY_ID\tTENANT\tNAME\tENABLED\tMODELS\tRPS\tBURST\tTPM\tEXPIRES")
	for _, k := range keys {
		exp := "-"
		if k.ExpiresAt != nil {
			exp = k.ExpiresAt.UTC().Format(time.RFC3339)
		}
		models := strings.Join(k.AllowedModels, ",")
		if models == "" {
			models = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\t%s\t%s\n", k.KeyID, k.TenantID, k.Name, k.Enabled, models,
			limitCol(k.RateLimitRPS), limitCol(k.BurstSize), limitCol(k.TokensPerMin), exp)
	}
	return tw.Flush()
}

func limitCol(v int) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprint(v)
}
