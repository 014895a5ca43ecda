package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/rules"
)

// What an upsert of one rule does, as the CLI reports it. LoxiLB's POST
// replaces a rule with the same key silently; these words make the
// difference between adding a rule and overwriting one visible.
const (
	changeCreated   = "created"
	changeUpdated   = "updated"
	changeUnchanged = "unchanged"
)

// fieldChange is one wire field an update changes, by its path in the
// rule's JSON (serviceArguments.sel, endpoints[1].weight).
type fieldChange struct {
	Path     string
	Old, New string // JSON values; "" when absent
}

// ruleChange is what applying a rule would do to the server's rule set.
type ruleChange struct {
	Kind   string        // changeCreated, changeUpdated, changeUnchanged
	Fields []fieldChange // for changeUpdated
	// SameName lists other rules (other keys) already carrying the rule's
	// name: DELETE --name would remove them all, `validate <name>` cannot
	// tell them apart.
	SameName []rules.Rule
}

// planChange reads the server's rules and says what applying r would do.
// It is advisory: another writer may change the rule between this read and
// the POST, so the POST's own answer decides created vs unchanged.
func planChange(ctx context.Context, c *client.Client, r rules.Rule) (ruleChange, error) {
	all, err := c.List(ctx)
	if err != nil {
		return ruleChange{}, err
	}
	return changeAgainst(all, r), nil
}

// changeAgainst is planChange's pure part.
func changeAgainst(all []rules.Rule, r rules.Rule) ruleChange {
	k := client.KeyOf(r)
	name := r.ServiceArguments.Name
	out := ruleChange{Kind: changeCreated}
	for _, x := range all {
		if client.KeyOf(x).Same(k) {
			out.Fields = diffRules(x, r)
			out.Kind = changeUpdated
			if len(out.Fields) == 0 {
				out.Kind = changeUnchanged
			}
			continue
		}
		if name != "" && x.ServiceArguments.Name == name {
			out.SameName = append(out.SameName, x)
		}
	}
	return out
}

// diffRules lists the wire fields that differ between the stored rule and
// the new one, both with defaults resolved (rules.Effective), so "0 means
// the default" is not reported as a change and an endpoint reorder is none.
func diffRules(stored, next rules.Rule) []fieldChange {
	a := flatten(effectiveJSON(rules.SpecOnly(stored)))
	b := flatten(effectiveJSON(rules.SpecOnly(next)))
	paths := map[string]bool{}
	for p := range a {
		paths[p] = true
	}
	for p := range b {
		paths[p] = true
	}
	var out []fieldChange
	for p := range paths {
		if !reflect.DeepEqual(a[p], b[p]) {
			out = append(out, fieldChange{Path: p, Old: jsonText(a[p]), New: jsonText(b[p])})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func effectiveJSON(r rules.Rule) any {
	b, err := json.Marshal(rules.Effective(r))
	if err != nil {
		return nil // a rules.Rule always marshals; nothing to compare otherwise
	}
	var v any
	_ = json.Unmarshal(b, &v)
	return v
}

// flatten maps every leaf of a JSON value to its path. Zero leaves (null,
// false, 0, "", empty list or object) are left out: the wire omits them and
// the server reads an absent key as its zero value.
func flatten(v any) map[string]any {
	out := map[string]any{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, x := range t {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, x)
			}
		case []any:
			for i, x := range t {
				walk(prefix+"["+strconv.Itoa(i)+"]", x)
			}
		case nil:
		case bool:
			if t {
				out[prefix] = t
			}
		case float64:
			if t != 0 {
				out[prefix] = t
			}
		case string:
			if t != "" {
				out[prefix] = t
			}
		default:
			out[prefix] = t
		}
	}
	walk("", v)
	return out
}

func jsonText(v any) string {
	if v == nil {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// fieldNames is "a, b, c" of the changed paths, for one-line reports.
func (c ruleChange) fieldNames() string {
	names := make([]string, len(c.Fields))
	for i, f := range c.Fields {
		names[i] = f.Path
	}
	return strings.Join(names, ", ")
}

// summary is the one-line outcome: "created", "updated (fields: a, b)",
// "unchanged". kind is the server's word when it answered, else the plan's.
func (c ruleChange) summary(kind string) string {
	if kind == changeUpdated && len(c.Fields) > 0 {
		return changeUpdated + " (fields: " + c.fieldNames() + ")"
	}
	return kind
}

// writeDiff prints a plan: "~ field: old → new" per changed field, "+" for
// a rule that would be created.
func writeDiff(w io.Writer, ref string, c ruleChange) {
	switch c.Kind {
	case changeCreated:
		fmt.Fprintf(w, "%s: would be created\n", ref)
	case changeUnchanged:
		fmt.Fprintf(w, "%s: unchanged\n", ref)
	default:
		fmt.Fprintf(w, "%s: would be updated (%d fields)\n", ref, len(c.Fields))
		for _, f := range c.Fields {
			fmt.Fprintf(w, "  ~ %s: %s → %s\n", f.Path, orAbsent(f.Old), orAbsent(f.New))
		}
	}
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

// warnSameName tells the operator that a name now means several rules.
func warnSameName(w io.Writer, name string, c ruleChange) {
	if len(c.SameName) == 0 {
		return
	}
	refs := make([]string, len(c.SameName))
	for i, r := range c.SameName {
		refs[i] = ruleRef(r)
	}
	fmt.Fprintf(w, "Warning: name %q is also used by %s: `delete lb --name=%s` removes all of them and `validate %s` cannot pick one (use VIP:port)\n",
		name, strings.Join(refs, ", "), name, name)
}
