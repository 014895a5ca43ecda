package optconf

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// Sources are where values other than flags come from.
type Sources struct {
	// File is the YAML document (a mapping of yaml names to values) and
	// FileName its name in errors; nil File means no file.
	File     []byte
	FileName string
	// EnvPrefix and Getenv give the environment: a name's variable is
	// EnvName(EnvPrefix, name); an empty value counts as unset.
	EnvPrefix string
	Getenv    func(string) string
}

// Apply fills *target, whose fields fs's flags are bound to and which holds
// the defaults, from the other sources: a field whose flag was set on the
// command line keeps the flag's value; otherwise its environment variable,
// parsed by the flag as if given on the command line (so lists and
// durations read alike), else the file's value, else the default stays.
//
// The whole file is checked even where a flag overrides it: an unknown key
// or a value of the wrong type is an error naming the key, never ignored.
// A key with no value (`key:`) keeps the default.
func Apply(fs *pflag.FlagSet, target any, src Sources) error {
	fields, err := Fields(target)
	if err != nil {
		return err
	}
	fromFile, err := decodeFile(fields, src)
	if err != nil {
		return err
	}
	for _, f := range fields {
		fl := fs.Lookup(f.Name)
		if fl != nil && fl.Changed {
			continue
		}
		if env := EnvName(src.EnvPrefix, f.Name); src.Getenv != nil && src.Getenv(env) != "" {
			if err := setFromEnv(fs, fl, f, env, src.Getenv(env)); err != nil {
				return err
			}
			continue
		}
		if v, ok := fromFile[f.Name]; ok {
			f.Value.Set(v)
		}
	}
	return nil
}

// setFromEnv parses an environment value through the field's flag (or, for
// a field without one, as a YAML scalar).
func setFromEnv(fs *pflag.FlagSet, fl *pflag.Flag, f Field, env, val string) error {
	if fl != nil {
		if err := fs.Set(fl.Name, val); err != nil {
			return fmt.Errorf("environment %s=%q: want %s", env, val, typeName(f.Value.Type()))
		}
		return nil
	}
	tmp := reflect.New(f.Value.Type())
	if err := yaml.Unmarshal([]byte(val), tmp.Interface()); err != nil {
		return fmt.Errorf("environment %s=%q: want %s", env, val, typeName(f.Value.Type()))
	}
	f.Value.Set(tmp.Elem())
	return nil
}

// decodeFile checks every key of the file and decodes its value into a
// fresh value of the field's type.
func decodeFile(fields []Field, src Sources) (map[string]reflect.Value, error) {
	out := map[string]reflect.Value{}
	if src.File == nil {
		return out, nil
	}
	name := src.FileName
	if name == "" {
		name = "config"
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src.File, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if doc.Kind == 0 { // empty document
		return out, nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return out, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of option names to values", name, root.Line)
	}
	byName := make(map[string]Field, len(fields))
	names := make([]string, 0, len(fields))
	for _, f := range fields {
		byName[f.Name] = f
		names = append(names, f.Name)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		f, ok := byName[k.Value]
		if !ok {
			msg := fmt.Sprintf("%s:%d: unknown key %q", name, k.Line, k.Value)
			if c := closest(k.Value, names); c != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", c)
			}
			return nil, errors.New(msg)
		}
		if _, dup := out[k.Value]; dup {
			return nil, fmt.Errorf("%s:%d: key %q given twice", name, k.Line, k.Value)
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue // `key:` keeps the default
		}
		tmp := reflect.New(f.Value.Type())
		if err := v.Decode(tmp.Interface()); err != nil {
			return nil, fmt.Errorf("%s:%d: key %q: want %s, got %s", name, v.Line, k.Value, typeName(f.Value.Type()), describe(v))
		}
		out[k.Value] = tmp.Elem()
	}
	return out, nil
}

// describe shows a YAML value briefly for an error.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	return "an unsupported value"
}
