package cli

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/daemon"
	"github.com/infergate/infergate/optconf"
	"gopkg.in/yaml.v3"
)

var updateExample = flag.Bool("update-example", false, "rewrite "+exampleConfig+" from the option structs")

// exampleConfig is the documented serve config file: every option with its
// default and its flag's help. It sits in its own directory because
// `apply -f configs/` and `serve --rules configs/` read every *.yaml in
// configs/ as rules.
const exampleConfig = "../configs/serve/infergate.yaml"

const exampleHeader = `# infergate serve --config configs/serve/infergate.yaml
#
# Every serve option under its flag's name, set to its default. Keep only the
# keys you change. A flag beats its environment variable (INFERGATE_ and the
# name upper-cased, dashes as underscores: INFERGATE_MAX_CLIENT_CONNS), which
# beats this file, which beats the default. Durations are Go durations (30s,
# 1m30s). Repeatable flags take a YAML list (api-allowed-host: [a, b]);
# kv-tokenizer takes a mapping MODEL: PATH ("" for any model). A key without a
# value keeps the default. Unknown keys are an error.
# 'infergate serve --print-config' prints the effective options this way.
#
# Generated from the option structs:
#   go test ./cli -run TestServeConfigExample -update-example

`

func renderExample(t *testing.T) []byte {
	t.Helper()
	opts := daemon.DefaultOptions()
	body, err := renderServeOptions(&opts, newServeCmd(&globals{}).Flags())
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(exampleHeader), body...)
}

// TestServeConfigExample: the example is what the option structs and flags
// say today, and lists exactly their keys, so it cannot fall behind a new
// knob or a changed default.
func TestServeConfigExample(t *testing.T) {
	want := renderExample(t)
	if *updateExample {
		if err := os.MkdirAll(filepath.Dir(exampleConfig), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(exampleConfig, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatalf("%v (regenerate: go test ./cli -run TestServeConfigExample -update-example)", err)
	}

	var doc map[string]yaml.Node
	if err := yaml.Unmarshal(got, &doc); err != nil {
		t.Fatalf("%s: %v", exampleConfig, err)
	}
	fields, err := optconf.Fields(&daemon.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var keys, names []string
	for k := range doc {
		keys = append(keys, k)
	}
	for _, f := range fields {
		names = append(names, f.Name)
	}
	sort.Strings(keys)
	sort.Strings(names)
	if !reflect.DeepEqual(keys, names) {
		t.Errorf("%s keys:\n%v\noption names:\n%v", exampleConfig, keys, names)
	}

	// Loaded as a config file it changes nothing.
	fromFile := daemon.DefaultOptions()
	fl := newServeCmd(&globals{}).Flags()
	if err := loadServeOptions(fl, serveSources{file: exampleConfig}, &fromFile, nil); err != nil {
		t.Fatal(err)
	}
	def := daemon.DefaultOptions()
	a, _ := optconf.Render(&fromFile, optconf.RenderOptions{})
	b, _ := optconf.Render(&def, optconf.RenderOptions{})
	if string(a) != string(b) {
		t.Errorf("%s loaded:\n%s\ndefaults:\n%s", exampleConfig, a, b)
	}

	if string(got) != string(want) {
		t.Errorf("%s is stale; regenerate: go test ./cli -run TestServeConfigExample -update-example", exampleConfig)
	}
}

// docConfigs are the config files the docs tell an operator to write, each
// found after a marker line and ending at a closing line.
var docConfigs = []struct{ doc, start, end string }{
	{"../README.md", "cat > infergate.yaml <<'EOF'", "EOF"},
	{"../docs/operations.md", "cat > /etc/infergate/infergate.yaml <<'EOF'", "EOF"},
}

// TestServeConfigDocExamples: the config files the README and
// docs/operations.md show load as written and set what they say.
func TestServeConfigDocExamples(t *testing.T) {
	for _, dc := range docConfigs {
		t.Run(filepath.Base(dc.doc), func(t *testing.T) {
			b, err := os.ReadFile(dc.doc)
			if err != nil {
				t.Fatal(err)
			}
			_, after, ok := strings.Cut(string(b), dc.start+"\n")
			if !ok {
				t.Fatalf("%s: no %q", dc.doc, dc.start)
			}
			after = strings.TrimPrefix(after, "\n```yaml\n")
			body, _, ok := strings.Cut(after, "\n"+dc.end+"\n")
			if !ok {
				t.Fatalf("%s: example after %q not closed by %q", dc.doc, dc.start, dc.end)
			}
			p := filepath.Join(t.TempDir(), "infergate.yaml")
			if err := os.WriteFile(p, []byte(body+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			opts := daemon.DefaultOptions()
			if err := loadServeOptions(newServeCmd(&globals{}).Flags(), serveSources{file: p}, &opts, nil); err != nil {
				t.Fatalf("%s example: %v\n%s", dc.doc, err, body)
			}
			if opts.LogFormat != "json" || opts.PrefillTimeout != 45*time.Second || len(opts.Auth.AllowedHosts) == 0 {
				t.Fatalf("%s example loaded as log-format %q, prefill-timeout %v, api-allowed-host %v",
					dc.doc, opts.LogFormat, opts.PrefillTimeout, opts.Auth.AllowedHosts)
			}
		})
	}
}
