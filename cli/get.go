package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// Output formats of `get lb`.
const (
	outTable = "table"
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
)

// Envelope of the YAML documents `get lb -o yaml` prints; `apply -f`
// accepts them back unchanged.
const (
	yamlAPIVersion = "infergate/v1"
	yamlKind       = "Loadbalancer"
	jsonKeyLbAttr  = "lbAttr"
)

type getFlags struct {
	tcp      string
	name     string
	compiled bool
}

func newGetCmd(g *globals) *cobra.Command {
	get := groupCmd("get", "Show rules")
	f := &getFlags{}
	lb := &cobra.Command{
		Use:     "lb [<VIP> --tcp=<port>]",
		Aliases: []string{"loadbalancer", "lbs"},
		Short:   "List rules, or show one rule (--compiled: its effective, compiled form)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("get lb takes at most one VIP, got %d arguments", len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			out := g.output
			if out == "" {
				out = outTable
			}
			switch out {
			case outTable, outWide, outJSON, outYAML:
			default:
				return usagef("-o %q is not an output format (want table|wide|json|yaml)", g.output)
			}
			if len(args) == 1 {
				return f.getOne(cmd, g, args[0], out)
			}
			if f.tcp != "" || f.compiled {
				return usagef("--tcp and --compiled need a VIP: get lb <VIP> --tcp=<port> [--compiled]")
			}
			return f.list(cmd, g, out)
		}),
	}
	lb.Flags().StringVar(&f.tcp, "tcp", "", "service port of the rule to show (with <VIP>)")
	lb.Flags().StringVar(&f.name, "name", "", "show only rules with this name")
	lb.Flags().StringVar(&f.name, "servName", "", "loxicmd's spelling of --name")
	lb.Flags().BoolVar(&f.compiled, "compiled", false, "print the compiled (effective) rule as JSON")
	get.AddCommand(lb)
	get.AddCommand(newGetAPIKeyCmd(g))
	get.AddCommand(newGetReplicasCmd(g), newGetEnginesCmd(g))
	return get
}

func (f *getFlags) getOne(cmd *cobra.Command, g *globals, vip, out string) error {
	if f.tcp == "" {
		return usagef("get lb <VIP> needs --tcp=<port>")
	}
	ps, err := parsePortSpec(f.tcp)
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	if f.compiled {
		raw, err := c.Compiled(cmd.Context(), vip, ps.port, protoTCP)
		if err != nil {
			return err
		}
		return writeIndentedJSON(g.env.Stdout, raw)
	}
	if out == outJSON {
		raw, err := c.GetRaw(cmd.Context(), vip, ps.port, protoTCP)
		if err != nil {
			return err
		}
		return writeIndentedJSON(g.env.Stdout, raw)
	}
	r, err := c.Get(cmd.Context(), vip, ps.port, protoTCP)
	if err != nil {
		return err
	}
	return renderWithHints(g, out, []rules.Rule{r})
}

// renderWithHints renders rules and, for the human formats, hints on
// stderr about what the table cannot say (rules without a probe).
func renderWithHints(g *globals, out string, rs []rules.Rule) error {
	if err := render(g.env.Stdout, out, rs); err != nil {
		return err
	}
	if out == outTable || out == outWide {
		hintUnprobed(g.env.Stderr, rs)
	}
	return nil
}

func (f *getFlags) list(cmd *cobra.Command, g *globals, out string) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	if out == outJSON {
		raw, err := c.ListRaw(cmd.Context())
		if err != nil {
			return err
		}
		if f.name != "" {
			if raw, err = filterRawByName(raw, f.name); err != nil {
				return err
			}
		}
		return writeIndentedJSON(g.env.Stdout, raw)
	}
	all, err := c.List(cmd.Context())
	if err != nil {
		return err
	}
	var rs []rules.Rule
	for _, r := range all {
		if f.name == "" || r.ServiceArguments.Name == f.name {
			rs = append(rs, r)
		}
	}
	return renderWithHints(g, out, rs)
}

// filterRawByName keeps the server's list body (every field, even ones this
// CLI does not model) and drops rules with another name.
func filterRawByName(raw json.RawMessage, name string) (json.RawMessage, error) {
	var list map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("decode rule list: %w", err)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(list[jsonKeyLbAttr], &items); err != nil {
		return nil, fmt.Errorf("decode rule list: %w", err)
	}
	kept := []json.RawMessage{}
	for _, it := range items {
		var peek struct {
			ServiceArguments struct {
				Name string `json:"name"`
			} `json:"serviceArguments"`
		}
		if err := json.Unmarshal(it, &peek); err != nil {
			return nil, fmt.Errorf("decode rule: %w", err)
		}
		if peek.ServiceArguments.Name == name {
			kept = append(kept, it)
		}
	}
	b, err := json.Marshal(kept)
	if err != nil {
		return nil, fmt.Errorf("encode rule list: %w", err)
	}
	list[jsonKeyLbAttr] = b
	return json.Marshal(list)
}

func writeIndentedJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("server sent invalid JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// render prints rules sorted by VIP, port, protocol (loxicmd's order).
func render(w io.Writer, out string, rs []rules.Rule) error {
	rs = append([]rules.Rule(nil), rs...)
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i].ServiceArguments, rs[j].ServiceArguments
		if c := compareVIP(a.ExternalIP, b.ExternalIP); c != 0 {
			return c < 0
		}
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		return a.Protocol < b.Protocol
	})
	switch out {
	case outYAML:
		return writeYAML(w, rs)
	case outWide:
		return writeTable(w, rs, true)
	default:
		return writeTable(w, rs, false)
	}
}

// compareVIP orders addresses numerically (127.0.0.9 before 127.0.0.10),
// falling back to text for anything that does not parse.
func compareVIP(a, b string) int {
	pa, okA := rules.ParseIPLiteral(a)
	pb, okB := rules.ParseIPLiteral(b)
	if okA && okB {
		return pa.Compare(pb)
	}
	return strings.Compare(a, b)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// queueCell is the rule's gateway queue summary ("-" without windows or
// runtime status).
func queueCell(st *rules.RuleStatus) string {
	if st == nil {
		return "-"
	}
	return dash(st.Queue)
}

// pdCell summarises the P/D and KV-exact settings of a rule.
func pdCell(sa rules.ServiceArguments) string {
	var parts []string
	if sa.PDDisaggMode {
		parts = append(parts, "pd")
		if sa.PDCacheAwareMode {
			parts = append(parts, "cache-aware")
		}
	}
	if sa.KVExactMode != 0 {
		parts = append(parts, "kv"+strconv.Itoa(sa.KVExactMode))
	}
	return dash(strings.Join(parts, ","))
}

func writeTable(w io.Writer, rs []rules.Rule, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "EXT IP\tPORT\tPROTO\tNAME\tMARK\tSEL\tMODE\tENDPOINTS\tENGINE\tP/D"
	if wide {
		head = "EXT IP\tPORT\tPROTO\tNAME\tMARK\tSEL\tMODE\tENGINE\tP/D\tHOST\tMODEL\tQUEUE\tENDPOINT\tEPORT\tWEIGHT\tROLE\tNIXL PORT\tPAIRING\tWINDOW\tSTATE\tHEALTH\tCOUNTER\tENGINE LOAD"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rs {
		sa := r.ServiceArguments
		port := strconv.Itoa(sa.Port)
		if sa.PortMax != 0 {
			port += "-" + strconv.Itoa(sa.PortMax)
		}
		cells := []string{sa.ExternalIP, port, protoCell(sa), dash(sa.Name), strconv.FormatUint(uint64(sa.Block), 10),
			selName(sa.Sel), modeName(sa.Mode)}
		if !wide {
			cells = append(cells, strconv.Itoa(len(r.Endpoints)), engineCell(sa), pdCell(sa))
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
			continue
		}
		cells = append(cells, engineCell(sa), pdCell(sa), dash(sa.Host), dash(sa.ModelName), queueCell(r.Status))
		blank := make([]string, len(cells))
		if len(r.Endpoints) == 0 {
			// One "-" per endpoint column, counted from the header so a
			// new column cannot leave this row short.
			noEndpoint := strings.Repeat("\t-", strings.Count(head, "\t")+1-len(cells))
			fmt.Fprintln(tw, strings.Join(cells, "\t")+noEndpoint)
		}
		for i, ep := range r.Endpoints {
			row := blank
			if i == 0 {
				row = cells
			}
			nixl := "-"
			if ep.NixlPort != 0 {
				nixl = strconv.Itoa(ep.NixlPort)
			}
			role := roleName(ep.EPRole)
			if ep.Backup {
				role += ",backup"
			}
			row = append(append([]string(nil), row...), ep.EndpointIP, strconv.Itoa(ep.TargetPort),
				strconv.Itoa(ep.Weight), role, nixl, dash(spec.PairingKey(rules.PairFacts(&ep))), dash(ep.WindowLoad), stateCell(ep), dash(ep.Health), dash(ep.Counter), dash(ep.EngineLoad))
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	return tw.Flush()
}

// yamlDoc is one `kind: Loadbalancer` document.
type yamlDoc struct {
	APIVersion string         `yaml:"apiVersion"`
	Kind       string         `yaml:"kind"`
	Metadata   map[string]any `yaml:"metadata,omitempty"`
	Spec       rules.Rule     `yaml:"spec"`
}

// writeYAML prints rules as documents `apply -f` accepts: output-only
// fields (status, endpoint state and counters) are dropped so applying the
// output back is a no-op.
func writeYAML(w io.Writer, rs []rules.Rule) error {
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	for _, r := range rs {
		doc := yamlDoc{APIVersion: yamlAPIVersion, Kind: yamlKind, Spec: rules.SpecOnly(r)}
		if r.ServiceArguments.Name != "" {
			doc.Metadata = map[string]any{"name": r.ServiceArguments.Name}
		}
		if err := enc.Encode(doc); err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
	}
	return enc.Close()
}

// ruleRef is "<vip>:<port>/<proto>" for messages.
func ruleRef(r rules.Rule) string {
	sa := r.ServiceArguments
	return net.JoinHostPort(sa.ExternalIP, strconv.Itoa(sa.Port)) + "/" + sa.Protocol
}

// engineCell shows the engine a rule runs with: an omitted kvEngineType on a
// P/D or KV-exact rule is vLLM (compile's default), so say so instead of "-".
func engineCell(sa rules.ServiceArguments) string {
	if sa.KVEngineType == "" && (sa.PDDisaggMode || sa.KVExactMode != 0) {
		return string(spec.EngineVLLM)
	}
	return dash(sa.KVEngineType)
}
