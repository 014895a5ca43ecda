package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// defaultClientPath is the client path explained when --path is not given.
const defaultClientPath = "/v1/chat/completions"

// Wire names of the explain envelope and the client bodies --prompt builds.
const (
	envPath      = "path"
	envHeaders   = "headers"
	envBody      = "body"
	bodyModel    = "model"
	bodyMessages = "messages"
	bodyPrompt   = "prompt"
	msgRole      = "role"
	msgContent   = "content"
	roleUser     = "user"
)

type explainFlags struct {
	tcp       string
	path      string
	file      string
	prompt    string
	model     string
	modelName string
	headers   []string
}

func newExplainCmd(g *globals) *cobra.Command {
	f := &explainFlags{}
	cmd := &cobra.Command{
		Use:   "explain <VIP> --tcp=<port> (-f body.json | --prompt \"...\") [--path /v1/chat/completions] [--header k=v]",
		Short: "Show where a request would be routed, and why (no request is sent to an engine)",
		Long: "Asks the gateway to run a rule's routing decision for a client request without sending it: " +
			"which ladder tier would pick which endpoint, why the others fell through, match rates, KV " +
			"scores and loads. -f takes the client's JSON body (- for stdin); --prompt builds a one-message " +
			"chat body (or a completion body with --path /v1/completions).",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("explain takes exactly one VIP, got %d arguments", len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return f.run(cmd.Context(), g, args[0])
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tcp, "tcp", "", "service port of the rule")
	fl.StringVar(&f.path, "path", defaultClientPath, "client request path")
	fl.StringVarP(&f.file, "file", "f", "", "client request body (JSON file, - for stdin)")
	fl.StringVar(&f.prompt, "prompt", "", "build a body with this prompt instead of -f")
	fl.StringVar(&f.model, "model", "", "model of the body built by --prompt")
	fl.StringVar(&f.modelName, "model-name", "", "model_name of the rule, when several rules share the VIP:port")
	fl.StringArrayVar(&f.headers, "header", nil, "client request header k=v (repeatable)")
	return cmd
}

func (f *explainFlags) run(ctx context.Context, g *globals, vip string) error {
	out := g.output
	switch out {
	case "", outTable, outWide:
		out = outTable
	case outJSON:
	default:
		return usagef("-o %q is not an output format for explain (want table|json)", g.output)
	}
	if f.tcp == "" {
		return usagef("explain <VIP> needs --tcp=<port>")
	}
	ps, err := parsePortSpec(f.tcp)
	if err != nil {
		return err
	}
	envelope, err := f.envelope(g)
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	raw, err := c.Explain(ctx, vip, ps.port, f.modelName, envelope)
	if err != nil {
		return err
	}
	if out == outJSON {
		return writeIndentedJSON(g.env.Stdout, raw)
	}
	return renderExplanation(g.env.Stdout, raw)
}

// envelope builds {"path","headers","body"} from the flags.
func (f *explainFlags) envelope(g *globals) ([]byte, error) {
	if (f.file == "") == (f.prompt == "") {
		return nil, usagef("explain needs exactly one of -f <body.json> and --prompt")
	}
	if !strings.HasPrefix(f.path, "/") {
		return nil, usagef("--path must start with /, got %q", f.path)
	}
	headers := map[string]string{}
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, usagef("--header %q: want k=v", h)
		}
		headers[strings.TrimSpace(k)] = v
	}
	var body json.RawMessage
	if f.file != "" {
		b, err := readBodyFile(f.file)
		if err != nil {
			return nil, err
		}
		if !json.Valid(b) {
			return nil, failure{fmt.Errorf("%s is not valid JSON", f.file)}
		}
		body = b
	} else {
		m := map[string]any{}
		if f.model != "" {
			m[bodyModel] = f.model
		}
		if strings.HasSuffix(f.path, "/chat/completions") {
			m[bodyMessages] = []map[string]string{{msgRole: roleUser, msgContent: f.prompt}}
		} else {
			m[bodyPrompt] = f.prompt
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encode body: %w", err)
		}
		body = b
	}
	env := map[string]any{envPath: f.path, envBody: body}
	if len(headers) > 0 {
		env[envHeaders] = headers
	}
	return json.Marshal(env)
}

func readBodyFile(name string) ([]byte, error) {
	if name == "-" {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, failure{fmt.Errorf("read stdin: %w", err)}
		}
		return b, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, failure{fmt.Errorf("read body: %w", err)}
	}
	return b, nil
}

// renderExplanation prints any explanation readably, in the server's field
// order: scalars as "key: value", objects indented under their key, and
// arrays of objects (the ladder's steps, candidates) as tables. It does not
// assume the datapath's exact shape, so new fields show up without a CLI
// change.
func renderExplanation(w io.Writer, raw []byte) error {
	v, err := decodeOrdered(json.NewDecoder(bytes.NewReader(raw)))
	if err != nil {
		return fmt.Errorf("decode explanation: %w", err)
	}
	var buf bytes.Buffer
	writeValue(&buf, "", v)
	_, err = w.Write(buf.Bytes())
	return err
}

// field is one member of a JSON object, in document order.
type field struct {
	key string
	val any // nil, bool, json.Number, string, []field (object), []any (array)
}

func decodeOrdered(d *json.Decoder) (any, error) {
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	return decodeFrom(d, tok)
}

func decodeFrom(d *json.Decoder, tok json.Token) (any, error) {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := []field{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				vt, err := d.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeFrom(d, vt)
				if err != nil {
					return nil, err
				}
				obj = append(obj, field{key: fmt.Sprint(kt), val: v})
			}
			_, err := d.Token() // '}'
			return obj, err
		case '[':
			arr := []any{}
			for d.More() {
				vt, err := d.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeFrom(d, vt)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := d.Token() // ']'
			return arr, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

func scalar(v any) string {
	switch t := v.(type) {
	case nil:
		return "-"
	case string:
		if t == "" {
			return "-"
		}
		return t
	default:
		return fmt.Sprint(t)
	}
}

func isScalar(v any) bool {
	switch v.(type) {
	case []field, []any:
		return false
	}
	return true
}

// writeValue prints v under indent.
func writeValue(buf *bytes.Buffer, indent string, v any) {
	switch t := v.(type) {
	case []field:
		tw := tabwriter.NewWriter(buf, 0, 4, 2, ' ', 0)
		for _, f := range t {
			if isScalar(f.val) {
				fmt.Fprintf(tw, "%s%s:\t%s\n", indent, f.key, scalar(f.val))
			}
		}
		_ = tw.Flush()
		for _, f := range t {
			if isScalar(f.val) {
				continue
			}
			if arr, ok := f.val.([]any); ok && allScalars(arr) {
				parts := make([]string, len(arr))
				for i, x := range arr {
					parts[i] = scalar(x)
				}
				fmt.Fprintf(buf, "%s%s: [%s]\n", indent, f.key, strings.Join(parts, ", "))
				continue
			}
			fmt.Fprintf(buf, "%s%s:\n", indent, f.key)
			writeValue(buf, indent+"  ", f.val)
		}
	case []any:
		if len(t) == 0 {
			fmt.Fprintf(buf, "%s(none)\n", indent)
			return
		}
		if rows, ok := objectRows(t); ok {
			writeTableOf(buf, indent, rows)
			return
		}
		for i, x := range t {
			fmt.Fprintf(buf, "%s[%d]\n", indent, i)
			writeValue(buf, indent+"  ", x)
		}
	default:
		fmt.Fprintf(buf, "%s%s\n", indent, scalar(t))
	}
}

func allScalars(arr []any) bool {
	for _, x := range arr {
		if !isScalar(x) {
			return false
		}
	}
	return true
}

// objectRows returns arr as objects whose members are all scalars (one
// table row each), or ok=false.
func objectRows(arr []any) ([][]field, bool) {
	rows := make([][]field, 0, len(arr))
	for _, x := range arr {
		obj, isObj := x.([]field)
		if !isObj {
			return nil, false
		}
		for _, f := range obj {
			if !isScalar(f.val) {
				return nil, false
			}
		}
		rows = append(rows, obj)
	}
	return rows, true
}

// writeTableOf prints rows with the union of their keys as columns, in
// first-seen order.
func writeTableOf(buf *bytes.Buffer, indent string, rows [][]field) {
	var cols []string
	seen := map[string]bool{}
	for _, r := range rows {
		for _, f := range r {
			if !seen[f.key] {
				seen[f.key] = true
				cols = append(cols, f.key)
			}
		}
	}
	tw := tabwriter.NewWriter(buf, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, indent+strings.ToUpper(strings.Join(cols, "\t"))+"\n")
	for _, r := range rows {
		vals := make(map[string]string, len(r))
		for _, f := range r {
			vals[f.key] = scalar(f.val)
		}
		cells := make([]string, len(cols))
		for i, c := range cols {
			if v, ok := vals[c]; ok {
				cells[i] = v
			} else {
				cells[i] = "-"
			}
		}
		fmt.Fprint(tw, indent+strings.Join(cells, "\t")+"\n")
	}
	_ = tw.Flush()
}
