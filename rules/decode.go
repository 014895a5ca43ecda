package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/jsonscan"
	"github.com/infergate/infergate/suggest"
)

// DecodeJSON decodes a rule body strictly. encoding/json drops unknown keys,
// which silently loses config (LoxiLB's `kv_exact_mode` quirk), so the body
// is decoded by a walk over its raw keys checked against the model's struct
// tags. Like LoxiLB (whose decoder is encoding/json) a known key is accepted
// in any letter case — loxicmd sends "BGP" and "Monitor", LoxiLB's scripts
// "inactiveTimeout" — but the same field twice under two casings is a 400.
// A key that is not a field in any case is a 400 unknown_field naming the
// full path and suggesting the right spelling; a LoxiLB field infergate does
// not serve is a 400 unsupported saying why (its neutral value is accepted,
// see loxilb_fields.go); a wrong JSON type or a duplicate key is a 400
// malformed_json naming the field. Output-only keys (status, state, counter,
// health, LoxiLB's hw_* counters) are accepted and dropped so a GET body can
// be re-POSTed. The result is not validated: call Validate or Compile.
func DecodeJSON(body []byte) (Rule, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return Rule{}, apierror.BadRequest(apierror.CodeMalformedJSON, "", "",
			"request body is empty; expected a JSON rule object")
	}
	if !jsonscan.Valid(body) {
		// Slow path: let encoding/json describe the syntax error.
		var v any
		err := json.Unmarshal(body, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return Rule{}, &apierror.Error{Status: 400, Code: apierror.CodeMalformedJSON,
			Message: "request body is not valid JSON: " + err.Error(), Err: err}
	}
	if body[0] != '{' {
		return Rule{}, apierror.BadRequest(apierror.CodeMalformedJSON, "", "",
			"request body must be a JSON object (a LoxiLB LoadbalanceEntry)")
	}
	var r Rule
	w := decoder{data: body}
	if err := w.object(ruleSchema, reflect.ValueOf(&r).Elem(), "", -1); err != nil {
		return Rule{}, err
	}
	if !w.sawServiceArgs {
		return Rule{}, apierror.BadRequest(apierror.CodeInvalidField, fieldServiceArguments,
			fieldServiceArguments+" in body is required",
			"serviceArguments is required: it holds the VIP, port and every rule knob")
	}
	return r, nil
}

// valueKind is the JSON shape a model field accepts.
type valueKind uint8

const (
	kindString valueKind = iota
	kindInt
	kindUint32
	kindBool
	kindObject    // nested struct (or pointer to one)
	kindArray     // slice of structs
	kindStringMap // map[string]string (annotations)
	kindStrings   // slice of strings (tls_versions, alpn_protocols)
)

type fieldSchema struct {
	kind  valueKind
	index int           // struct field index
	ptr   bool          // field is a pointer (allocated when present)
	skip  bool          // output-only: shape-checked, never stored
	obj   *objectSchema // kindObject, kindArray
	bit   int           // position in the per-object duplicate bitmap
}

// objectSchema is the known-key set of one model struct, derived from its
// json tags so it can never drift from the model.
type objectSchema struct {
	fields map[string]fieldSchema
	names  []string          // for edit-distance suggestions, tag order
	folded map[string]string // case/underscore-folded name → real name
	lower  map[string]string // ASCII-lowercased name → real name (case-insensitive match)
	// extra are the LoxiLB keys of this object that are not model fields
	// (unsupported or output-only), by lowercased name.
	extra map[string]extraField
}

// ruleSchema is built once from the model's tags and never mutated.
var (
	ruleSchema        = buildSchema(reflect.TypeFor[Rule]())
	serviceArgsSchema = ruleSchema.fields[fieldServiceArguments].obj
)

// outputOnly are the GET-only keys a re-POSTed body may carry.
var outputOnly = map[string]bool{fieldStatus: true, fieldState: true, fieldCounter: true, fieldHealth: true, fieldEngineLoad: true, fieldWindowLoad: true}

// maxObjectFields bounds the duplicate-key bitmap (two words).
const maxObjectFields = 128

func buildSchema(t reflect.Type) *objectSchema {
	o := &objectSchema{fields: map[string]fieldSchema{}, folded: map[string]string{},
		lower: map[string]string{}, extra: extraFieldsOf(t)}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		fs := fieldSchema{index: i, skip: outputOnly[name], bit: len(o.names)}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft, fs.ptr = ft.Elem(), true
		}
		switch ft.Kind() {
		case reflect.String:
			fs.kind = kindString
		case reflect.Bool:
			fs.kind = kindBool
		case reflect.Int, reflect.Int32, reflect.Int64:
			fs.kind = kindInt
		case reflect.Uint32:
			fs.kind = kindUint32
		case reflect.Struct:
			fs.kind, fs.obj = kindObject, buildSchema(ft)
		case reflect.Map:
			if ft.Key().Kind() != reflect.String || ft.Elem().Kind() != reflect.String {
				panic("rules: unsupported map field " + f.Name)
			}
			fs.kind = kindStringMap
		case reflect.Slice:
			if ft.Elem().Kind() == reflect.String && !fs.ptr {
				fs.kind = kindStrings
				break
			}
			if ft.Elem().Kind() != reflect.Struct || fs.ptr {
				panic("rules: unsupported slice field " + f.Name)
			}
			fs.kind, fs.obj = kindArray, buildSchema(ft.Elem())
		default:
			panic("rules: unsupported model field kind " + f.Name + " " + ft.Kind().String())
		}
		o.fields[name] = fs
		o.names = append(o.names, name)
		o.folded[foldKey(name)] = name
		o.lower[lowerASCII(name)] = name
	}
	if len(o.names) > maxObjectFields {
		panic("rules: model struct " + t.Name() + " has too many fields for the duplicate check")
	}
	return o
}

// foldKey makes `kv_exact_mode`, `KVExactMode` and `kvexactmode` compare equal.
func foldKey(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || c == '-':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// lowerASCII lowercases ASCII letters only: key matching must not depend on
// Unicode tables (a key with non-ASCII letters is never a model field).
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// suggest returns the known key a mistyped key most likely meant, or "".
func (o *objectSchema) suggest(key string) string {
	if n, ok := o.folded[foldKey(key)]; ok {
		return n
	}
	best, bestD := "", len(key)/3+1
	fk := foldKey(key)
	for _, n := range o.names {
		if d := suggest.Distance(fk, foldKey(n)); d < bestD || (d == bestD && best == "" && d <= 2) {
			best, bestD = n, d
		}
	}
	return best
}

// decoder walks syntactically valid JSON (json.Valid has passed) against the
// schema and fills the rule in the same pass: every key must be a model tag
// (exact case), appear once, and hold a value of the field's JSON type.
// Replacing encoding/json here is what makes strictness cheap: one walk, no
// second decode. Paths are built only when reporting an error. Semantics
// match encoding/json (a differential fuzz test holds it to that), except
// that duplicate keys are rejected rather than "last one wins".
type decoder struct {
	data           []byte
	pos            int
	sawServiceArgs bool
}

func joinPath(base string, idx int, key string) string {
	p := base
	if idx >= 0 {
		p += "[" + strconv.Itoa(idx) + "]"
	}
	if key == "" {
		return p
	}
	if p == "" {
		return key
	}
	return p + "." + key
}

func (w *decoder) ws() { w.pos = jsonscan.SkipSpace(w.data, w.pos) }

// next moves to element n of the container being walked, past its comma,
// and reports whether the container closed instead (jsonscan.Step; the body
// is valid, so there is nothing else to report).
func (w *decoder) next(n int, closing byte) (done bool) {
	w.pos, done, _ = jsonscan.Step(w.data, w.pos, n, closing)
	return done
}

// object decodes the object at w.pos ('{') into v (a struct; invalid Value
// = check only).
func (w *decoder) object(o *objectSchema, v reflect.Value, base string, idx int) error {
	w.pos++ // '{'
	var seen [maxObjectFields / 64]uint64
	var extraSeen map[string]bool // LoxiLB extra keys met (rare)
	for n := 0; ; n++ {
		if w.next(n, '}') {
			return nil
		}
		raw := w.stringRaw()
		w.ws()
		w.pos++ // ':'
		w.ws()
		fs, ok := o.fields[string(raw)] // no allocation for a map index
		if !ok && bytes.IndexByte(raw, '\\') >= 0 {
			fs, ok = o.fields[unquoteKey(raw)]
		}
		if !ok {
			key := unquoteKey(raw)
			lk := lowerASCII(key)
			if name, found := o.lower[lk]; found {
				fs, ok = o.fields[name], true
			} else if x, found := o.extra[lk]; found {
				start := w.pos
				w.skip()
				if err := x.check(w.data[start:w.pos], joinPath(base, idx, x.name)); err != nil {
					return err
				}
				if extraSeen == nil {
					extraSeen = map[string]bool{}
				}
				if extraSeen[x.name] {
					return duplicateKey(joinPath(base, idx, x.name), key)
				}
				extraSeen[x.name] = true
				continue
			} else {
				return unknownField(o, joinPath(base, idx, key), key)
			}
		}
		if seen[fs.bit/64]&(1<<(fs.bit%64)) != 0 {
			return duplicateKey(joinPath(base, idx, o.names[fs.bit]), unquoteKey(raw))
		}
		seen[fs.bit/64] |= 1 << (fs.bit % 64)
		if fs.obj == serviceArgsSchema && w.data[w.pos] != 'n' {
			w.sawServiceArgs = true
		}
		var fv reflect.Value
		if v.IsValid() && !fs.skip {
			fv = v.Field(fs.index)
		}
		if err := w.value(fs, fv, base, idx, raw); err != nil {
			return err
		}
	}
}

func unknownField(o *objectSchema, path, key string) error {
	msg := fmt.Sprintf("unknown field %q", path)
	if s := o.suggest(key); s != "" {
		msg += fmt.Sprintf("; did you mean %q? (letter case does not matter, underscores do)", s)
	}
	return apierror.BadRequest(apierror.CodeUnknownField, path, "", msg)
}

// duplicateKey reports a field given twice; keys match case-insensitively,
// so "Monitor" and "monitor" are the same field.
func duplicateKey(path, spelling string) error {
	return apierror.BadRequest(apierror.CodeMalformedJSON, path, "",
		fmt.Sprintf("duplicate key %q (given again as %q; keys match case-insensitively)", path, spelling))
}

// value decodes one value of field fs into fv (invalid = check only).
func (w *decoder) value(fs fieldSchema, fv reflect.Value, base string, idx int, rawKey []byte) error {
	c := w.data[w.pos]
	key := func() string { return unquoteKey(rawKey) }
	if c == 'n' { // null: like encoding/json, nil a pointer/slice, else no-op
		w.pos += 4
		if fv.IsValid() && (fs.ptr || fs.kind == kindArray || fs.kind == kindStringMap || fs.kind == kindStrings) {
			fv.SetZero()
		}
		return nil
	}
	typeErr := func(want string) error {
		path := joinPath(base, idx, key())
		got := jsonTypeName(c)
		return apierror.BadRequest(apierror.CodeMalformedJSON, path,
			fmt.Sprintf("%s in body must be of type %s: %q", path, want, got),
			fmt.Sprintf("%s must be a JSON %s, got %s", path, want, got))
	}
	if fv.IsValid() && fs.ptr && fs.kind != kindArray && fs.kind != kindStrings {
		p := reflect.New(fv.Type().Elem())
		fv.Set(p)
		fv = p.Elem()
	}
	switch fs.kind {
	case kindString:
		if c != '"' {
			w.skip()
			return typeErr("string")
		}
		raw := w.stringRaw()
		if fv.IsValid() {
			str, err := jsonscan.String(raw)
			if err != nil {
				return typeErr("string")
			}
			fv.SetString(str)
		}
	case kindBool:
		if c != 't' && c != 'f' {
			w.skip()
			return typeErr("boolean")
		}
		w.skip()
		if fv.IsValid() {
			fv.SetBool(c == 't')
		}
	case kindInt, kindUint32:
		start := w.pos
		w.skip()
		if !isNumberStart(c) {
			return typeErr("integer")
		}
		lit := w.data[start:w.pos]
		n, u, ok := parseInteger(lit, fs.kind == kindUint32)
		if !ok {
			path := joinPath(base, idx, key())
			want := "integer"
			if fs.kind == kindUint32 {
				want = "non-negative 32-bit integer"
			}
			return apierror.BadRequest(apierror.CodeMalformedJSON, path,
				fmt.Sprintf("%s in body must be of type integer: %q", path, string(lit)),
				fmt.Sprintf("%s must be a JSON %s, got %s", path, want, string(lit)))
		}
		if fv.IsValid() {
			if fs.kind == kindUint32 {
				fv.SetUint(u)
			} else {
				fv.SetInt(n)
			}
		}
	case kindObject:
		if c != '{' {
			w.skip()
			return typeErr("object")
		}
		return w.object(fs.obj, fv, joinPath(base, idx, key()), -1)
	case kindArray:
		if c != '[' {
			w.skip()
			return typeErr("array")
		}
		return w.array(fs.obj, fv, joinPath(base, idx, key()))
	case kindStringMap:
		if c != '{' {
			w.skip()
			return typeErr("object")
		}
		return w.stringMap(fv, joinPath(base, idx, key()))
	case kindStrings:
		if c != '[' {
			w.skip()
			return typeErr("array")
		}
		return w.strings(fv, joinPath(base, idx, key()))
	}
	return nil
}

// strings decodes an array of strings into the slice fv (invalid = check
// only); a null element is "" as encoding/json makes it.
func (w *decoder) strings(fv reflect.Value, path string) error {
	w.pos++ // '['
	var out []string
	if fv.IsValid() {
		out = make([]string, 0, 2)
	}
	for i := 0; ; i++ {
		if w.next(i, ']') {
			if fv.IsValid() {
				fv.Set(reflect.ValueOf(out))
			}
			return nil
		}
		switch c := w.data[w.pos]; c {
		case '"':
			str, err := jsonscan.String(w.stringRaw())
			if err != nil {
				return apierror.BadRequest(apierror.CodeMalformedJSON, joinPath(path, i, ""), "", "invalid JSON string")
			}
			out = append(out, str)
		case 'n':
			w.pos += 4
			out = append(out, "")
		default:
			p := joinPath(path, i, "")
			got := jsonTypeName(c)
			return apierror.BadRequest(apierror.CodeMalformedJSON, p,
				fmt.Sprintf("%s in body must be of type string: %q", p, got),
				fmt.Sprintf("%s must be a JSON string, got %s", p, got))
		}
	}
}

// stringMap decodes an object of string values into the map fv (invalid =
// check only). Keys are taken verbatim (they are data, not field names);
// a key given twice is rejected like any duplicate.
func (w *decoder) stringMap(fv reflect.Value, path string) error {
	w.pos++ // '{'
	m := map[string]string{}
	for n := 0; ; n++ {
		if w.next(n, '}') {
			if fv.IsValid() {
				fv.Set(reflect.ValueOf(m))
			}
			return nil
		}
		k, err := jsonscan.String(w.stringRaw())
		if err != nil {
			return apierror.BadRequest(apierror.CodeMalformedJSON, path, "", path+" has a malformed key")
		}
		w.ws()
		w.pos++ // ':'
		w.ws()
		p := path + "." + k
		if w.data[w.pos] != '"' {
			got := jsonTypeName(w.data[w.pos])
			return apierror.BadRequest(apierror.CodeMalformedJSON, p,
				fmt.Sprintf("%s in body must be of type string: %q", p, got),
				fmt.Sprintf("%s must be a JSON string, got %s", p, got))
		}
		v, err := jsonscan.String(w.stringRaw())
		if err != nil {
			return apierror.BadRequest(apierror.CodeMalformedJSON, p, "", p+" is not a valid string")
		}
		if _, dup := m[k]; dup {
			return apierror.BadRequest(apierror.CodeMalformedJSON, p, "", fmt.Sprintf("duplicate key %q", p))
		}
		m[k] = v
	}
}

// array decodes an array of objects into the slice fv (invalid = check only).
func (w *decoder) array(o *objectSchema, fv reflect.Value, path string) error {
	w.pos++ // '['
	if fv.IsValid() {
		fv.Set(reflect.MakeSlice(fv.Type(), 0, 4)) // [] decodes to empty, not nil
	}
	for i := 0; ; i++ {
		if w.next(i, ']') {
			return nil
		}
		var ev reflect.Value
		if fv.IsValid() {
			if fv.Len() == fv.Cap() {
				fv.Grow(1) // fresh capacity is zeroed
			}
			fv.SetLen(i + 1)
			ev = fv.Index(i)
		}
		switch w.data[w.pos] {
		case '{':
			if err := w.object(o, ev, path, i); err != nil {
				return err
			}
		case 'n': // a null element decodes as a zero element, as encoding/json does
			w.pos += 4
		default:
			p := joinPath(path, i, "")
			got := jsonTypeName(w.data[w.pos])
			return apierror.BadRequest(apierror.CodeMalformedJSON, p,
				fmt.Sprintf("%s in body must be of type object: %q", p, got),
				fmt.Sprintf("%s must be a JSON object, got %s", p, got))
		}
	}
}

// stringRaw consumes a string literal and returns its body between the
// quotes, escapes not decoded (the body is valid: jsonscan.Valid passed).
func (w *decoder) stringRaw() []byte {
	start := w.pos + 1
	w.pos, _ = jsonscan.SkipString(w.data, w.pos)
	return w.data[start : w.pos-1]
}

// unquoteKey decodes JSON escapes in a key (rare: `"kv\u0045xactMode"`).
func unquoteKey(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	s, err := jsonscan.String(raw)
	if err != nil {
		return string(raw)
	}
	return s
}

// skip consumes one complete value of any type.
func (w *decoder) skip() { w.pos, _ = jsonscan.SkipValue(w.data, w.pos) }

func isNumberStart(c byte) bool { return c == '-' || ('0' <= c && c <= '9') }

// parseInteger parses a JSON number literal into an int64 (or a uint32)
// the way encoding/json would: no fraction, no exponent, no overflow.
func parseInteger(lit []byte, unsigned32 bool) (int64, uint64, bool) {
	if unsigned32 {
		u, err := jsonscan.ParseUint(lit, 32)
		return 0, u, err == nil
	}
	n, err := jsonscan.ParseInt(lit)
	return n, 0, err == nil
}

func jsonTypeName(c byte) string {
	switch {
	case c == '"':
		return "string"
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	default:
		return "number"
	}
}
