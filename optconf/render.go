package optconf

import (
	"bytes"
	"fmt"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// Redacted replaces a non-empty secret when options are rendered.
const Redacted = "<redacted>"

// RenderOptions shape Render's output.
type RenderOptions struct {
	// Flags, if set, give each key a comment: its flag's usage.
	Flags *pflag.FlagSet
	// Unset are keys rendered without a value (`key:`, which Apply reads
	// as "keep the default"), with Unset[key] as their comment: for
	// defaults derived at run time, which an example must not pin.
	Unset map[string]string
}

// Render writes every field of *target as one flat YAML mapping in
// declaration order, secrets redacted. Applied to a file, the output
// reproduces the same options (except the redacted secrets).
func Render(target any, ro RenderOptions) ([]byte, error) {
	fields, err := Fields(target)
	if err != nil {
		return nil, err
	}
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range fields {
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: f.Name}
		if ro.Flags != nil {
			if fl := ro.Flags.Lookup(f.Name); fl != nil {
				k.HeadComment = fl.Usage
			}
		}
		v := &yaml.Node{}
		switch why, unset := ro.Unset[f.Name]; {
		case unset:
			v.Kind, v.Tag, v.LineComment = yaml.ScalarNode, "!!null", why
		case f.Secret && !f.Value.IsZero():
			v.Kind, v.Value = yaml.ScalarNode, Redacted
		default:
			if err := v.Encode(f.Value.Interface()); err != nil {
				return nil, fmt.Errorf("optconf: render %s: %w", f.Name, err)
			}
		}
		m.Content = append(m.Content, k, v)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("optconf: render: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
