package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/atomicfile"
	"github.com/infergate/infergate/rules"
	"github.com/spf13/cobra"
)

// LoxiLB's saved-config format: `loxicmd save --lb` writes
// {dir}/lbconfig.txt holding GET /config/loadbalancer/all's body
// ({"lbAttr":[…]}) with the endpoint counters blanked, renaming the previous
// file to lbconfig.txt.bk; `loxicmd apply --lb <file>` re-POSTs each rule.
// Unlike loxicmd's apply --lb (which copies only VIP, port, sel, mode and
// endpoints), every field is re-POSTed as saved.
const (
	lbConfigFile       = "lbconfig.txt"
	lbConfigBackup     = ".bk"
	defaultLoxiConfDir = "/etc/loxilb/"
	lbConfigFileMode   = 0o600
	lbConfigDirMode    = 0o700
)

func newSaveCmd(g *globals) *cobra.Command {
	var lb, all bool
	var dir string
	cmd := &cobra.Command{
		Use:   "save --lb [-c <dir>]",
		Short: "Save the rules as LoxiLB's lbconfig.txt (loxicmd save --lb)",
		Args:  exactArgs(0, "none"),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if !lb && !all {
				return usagef("say what to save: --lb (or --all, which is the same here: rules are all infergate has)")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			raw, err := c.ListRaw(cmd.Context())
			if err != nil {
				return err
			}
			body, err := blankCounters(raw)
			if err != nil {
				return fmt.Errorf("save: %w", err)
			}
			// loxicmd creates the directory; the rules may name engines
			// and keys' policies, so only the owner reads it.
			if err := os.MkdirAll(dir, lbConfigDirMode); err != nil {
				return fmt.Errorf("save: create %s: %w", dir, err)
			}
			path := filepath.Join(dir, lbConfigFile)
			if err := writeWithBackup(path, body); err != nil {
				return err
			}
			fmt.Fprintf(g.env.Stdout, "saved %s\n", path)
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.BoolVar(&lb, "lb", false, "save the load-balancer rules")
	fl.BoolVar(&all, "all", false, "save everything (the rules)")
	fl.StringVarP(&dir, "configpath", "c", defaultLoxiConfDir, "directory of lbconfig.txt (created 0700 when missing)")
	return cmd
}

// blankCounters clears the output-only runtime fields of each endpoint (as
// loxicmd does) and re-indents; every other field is kept as the server sent it.
func blankCounters(raw []byte) ([]byte, error) {
	var doc struct {
		LbAttr []map[string]json.RawMessage `json:"lbAttr"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("the server's rule list is not {\"lbAttr\":[…]}: %w", err)
	}
	for _, r := range doc.LbAttr {
		delete(r, "status")
		var eps []map[string]json.RawMessage
		if err := json.Unmarshal(r["endpoints"], &eps); err != nil {
			continue
		}
		for _, ep := range eps {
			delete(ep, "state")
			delete(ep, "counter")
			delete(ep, "health")
		}
		if b, err := json.Marshal(eps); err == nil {
			r["endpoints"] = b
		}
	}
	if doc.LbAttr == nil {
		doc.LbAttr = []map[string]json.RawMessage{}
	}
	return json.MarshalIndent(doc, "", "  ")
}

// writeWithBackup writes path atomically, keeping the previous file as .bk.
func writeWithBackup(path string, body []byte) error {
	if err := os.Rename(path, path+lbConfigBackup); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("save: keep the previous %s: %w", path, err)
	}
	if err := atomicfile.Write(path, append(body, '\n'), lbConfigFileMode); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	return nil
}

// lbConfigRule is one rule of an lbconfig.txt: its body as saved and the
// key read from it.
type lbConfigRule struct {
	body []byte
	rule rules.Rule
}

// loadLBConfig reads a LoxiLB lbconfig.txt. A file that does not parse
// applies nothing.
func loadLBConfig(path string) ([]lbConfigRule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("apply --lb: %w", err)
	}
	var doc struct {
		LbAttr []json.RawMessage `json:"lbAttr"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("apply --lb %s: not a LoxiLB lbconfig.txt ({\"lbAttr\":[…]}): %w", path, err)
	}
	out := make([]lbConfigRule, 0, len(doc.LbAttr))
	for i, raw := range doc.LbAttr {
		var r rules.Rule // lenient: the server validates the body itself
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("apply --lb %s: lbAttr[%d]: %w", path, i, err)
		}
		out = append(out, lbConfigRule{body: raw, rule: r})
	}
	return out, nil
}

// applyLBConfig re-POSTs every rule of an lbconfig.txt, reporting each.
func applyLBConfig(cmd *cobra.Command, g *globals, path string) error {
	rs, err := loadLBConfig(path)
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	rejected := 0
	for i, r := range rs {
		src := fmt.Sprintf("%s#%d", path, i+1)
		res, err := c.ApplyRaw(cmd.Context(), client.KeyOf(r.rule), r.body)
		if err != nil && !isRejection(err) {
			return fmt.Errorf("%s %s: %w", src, ruleRef(r.rule), err)
		}
		if err != nil {
			rejected++
			fmt.Fprintf(g.env.Stderr, "%s %s rejected:\n", src, ruleRef(r.rule))
			printError(g.env.Stderr, err)
			continue
		}
		fmt.Fprintf(g.env.Stdout, "%s %s %s\n", src, ruleRef(r.rule), res)
	}
	if rejected > 0 {
		return failure{err: fmt.Errorf("%d of %d rules not applied", rejected, len(rs))}
	}
	return nil
}
