package swagger

import (
	"fmt"
	"math"
	"reflect"
	"strings"
)

// generator reflects Go types into swagger definitions, applying the
// hand-written field annotations by "Definition.jsonName".
type generator struct {
	defs  map[string]*Schema
	names map[reflect.Type]string
	notes map[string]FieldNote
	used  map[string]bool // annotation keys that matched a field
}

func newGenerator(names map[reflect.Type]string, notes map[string]FieldNote) *generator {
	return &generator{
		defs:  map[string]*Schema{},
		names: names,
		notes: notes,
		used:  map[string]bool{},
	}
}

// defName is the definition name of a struct type: an explicit name (LoxiLB's
// model names for the wire types) or the Go type name.
func (g *generator) defName(t reflect.Type) string {
	if n, ok := g.names[t]; ok {
		return n
	}
	return t.Name()
}

// ref returns a $ref to t's definition, generating it on first use.
func (g *generator) ref(t reflect.Type) *Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return g.schema(t)
}

func ptrFloat(f float64) *float64 { return &f }

// schema returns the schema of t; structs become definitions and a $ref.
func (g *generator) schema(t reflect.Type) *Schema {
	switch t.Kind() {
	case reflect.Pointer:
		s := g.schema(t.Elem())
		if s.Ref == "" {
			s.Nullable = true
		}
		return s
	case reflect.Struct:
		name := g.defName(t)
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = &Schema{Type: "object"} // placeholder breaks cycles
			g.defs[name] = g.object(name, t)
		}
		return &Schema{Ref: "#/definitions/" + name}
	case reflect.Slice, reflect.Array:
		return &Schema{Type: "array", Items: g.schema(t.Elem())}
	case reflect.Map:
		return &Schema{Type: "object", AdditionalProperties: g.schema(t.Elem())}
	case reflect.String:
		return &Schema{Type: "string"}
	case reflect.Bool:
		return &Schema{Type: "boolean"}
	case reflect.Int, reflect.Int64:
		return &Schema{Type: "integer", Format: "int64"}
	case reflect.Int8, reflect.Int16, reflect.Int32:
		return &Schema{Type: "integer", Format: "int32"}
	case reflect.Uint8:
		return &Schema{Type: "integer", Format: "int32", Minimum: ptrFloat(0), Maximum: ptrFloat(math.MaxUint8)}
	case reflect.Uint16:
		return &Schema{Type: "integer", Format: "int32", Minimum: ptrFloat(0), Maximum: ptrFloat(math.MaxUint16)}
	case reflect.Uint32:
		return &Schema{Type: "integer", Format: "int64", Minimum: ptrFloat(0), Maximum: ptrFloat(math.MaxUint32)}
	case reflect.Uint, reflect.Uint64:
		return &Schema{Type: "integer", Format: "int64", Minimum: ptrFloat(0)}
	case reflect.Float32:
		return &Schema{Type: "number", Format: "float"}
	case reflect.Float64:
		return &Schema{Type: "number", Format: "double"}
	case reflect.Interface:
		return &Schema{}
	}
	panic(fmt.Sprintf("swagger: no schema for kind %s (%s)", t.Kind(), t))
}

// object builds a struct's definition from its exported fields' JSON tags.
func (g *generator) object(name string, t reflect.Type) *Schema {
	obj := &Schema{Type: "object", Properties: map[string]*Schema{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		jname, _, _ := strings.Cut(tag, ",")
		if jname == "" {
			jname = f.Name
		}
		ps := g.schema(f.Type)
		key := name + "." + jname
		if note, ok := g.notes[key]; ok {
			g.used[key] = true
			ps = note.apply(ps)
			if note.Required {
				obj.Required = append(obj.Required, jname)
			}
		}
		obj.Properties[jname] = ps
	}
	return obj
}

// FieldNote is the hand-written part of a field's schema.
type FieldNote struct {
	Description string
	Enum        []interface{}
	Min, Max    *float64
	Default     interface{}
	Required    bool
	ReadOnly    bool
	Served      []interface{} // values of Enum infergate serves (x-infergate-served)
}

// apply decorates s. A $ref cannot carry siblings in swagger 2.0, so a
// referenced field's description is dropped rather than emitted invalidly.
func (n FieldNote) apply(s *Schema) *Schema {
	if s.Ref != "" {
		return s
	}
	out := *s
	out.Description = n.Description
	if n.Enum != nil {
		out.Enum = n.Enum
	}
	if n.Min != nil {
		out.Minimum = n.Min
	}
	if n.Max != nil {
		out.Maximum = n.Max
	}
	if n.Default != nil {
		out.Default = n.Default
	}
	out.ReadOnly = n.ReadOnly
	out.Served = n.Served
	if out.Type == "array" && n.Max != nil {
		// Bounds on a list are item counts.
		out.Minimum, out.Maximum = nil, nil
		maxItems := int(*n.Max)
		out.MaxItems = &maxItems
		if n.Min != nil {
			minItems := int(*n.Min)
			out.MinItems = &minItems
		}
	}
	return &out
}
