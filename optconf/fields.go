package optconf

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/infergate/infergate/suggest"
)

// Field is one configurable leaf of an option struct: its yaml name and
// the addressable value the flags bind to.
type Field struct {
	Name   string
	Value  reflect.Value
	Secret bool // tagged optconf:"secret": redacted when rendered
}

// Fields lists the configurable leaves of *target in declaration order,
// inline sub-structs flattened. target must be a pointer to a struct; a yaml
// name given twice is an error (the file could not say which it means).
func Fields(target any) ([]Field, error) {
	v := reflect.ValueOf(target)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("optconf: want a pointer to a struct, got %T", target)
	}
	var out []Field
	seen := map[string]bool{}
	var walk func(s reflect.Value) error
	walk = func(s reflect.Value) error {
		t := s.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case name == "-":
			case opts == "inline":
				if err := walk(s.Field(i)); err != nil {
					return err
				}
			case name != "":
				if seen[name] {
					return fmt.Errorf("optconf: yaml name %q used by two fields of %s", name, t)
				}
				seen[name] = true
				out = append(out, Field{Name: name, Value: s.Field(i), Secret: f.Tag.Get("optconf") == "secret"})
			}
		}
		return nil
	}
	if err := walk(v.Elem()); err != nil {
		return nil, err
	}
	return out, nil
}

// EnvName is the environment variable of a yaml name: the prefix, then the
// name upper-cased with dashes as underscores (max-client-conns →
// INFERGATE_MAX_CLIENT_CONNS).
func EnvName(prefix, name string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

var durationType = reflect.TypeOf(time.Duration(0))

// typeName says what a value of t looks like, for errors.
func typeName(t reflect.Type) string {
	if t == durationType {
		return "a duration such as 30s or 1m30s"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(typeName(t.Elem()), "a "), "an ") + "s"
	case reflect.Map:
		return "a mapping of " + t.Key().String() + " to " + t.Elem().String()
	}
	return t.String()
}

// closest is the name nearest to s by edit distance, if near enough to be
// a likely typo; "" otherwise.
func closest(s string, names []string) string {
	best, bestD := "", len(s)/3+2
	for _, n := range names {
		if d := suggest.Distance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}
