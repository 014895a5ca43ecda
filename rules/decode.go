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
)

// DecodeJSON decodes a rule body strictly. encoding/json matches keys
// case-insensitively and drops unknown ones, which silently loses config
// (LoxiLB's `kv_exact_mode` quirk), so the raw object keys are walked first
// against the model's struct tags: an unknown or mis-cased key is a 400
// unknown_field naming the full path and suggesting the right spelling, and a
// value of the wrong JSON type is a 400 malformed_json naming the field.
// Output-only keys (status, state, counter) are accepted and cleared so a GET
// body can be re-POSTed. The result is not validated: call Validate/Compile.
func DecodeJSON(body []byte) (Rule, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return Rule{}, apierror.BadRequest(apierror.CodeMalformedJSON, "", "",
			"request body is empty; expected a JSON rule object")
	}
	// encoding/json checks syntax in the same pass; only a syntactically
	// valid body reaches the key walker, which relies on that.
	var r Rule
	uerr := json.Unmarshal(body, &r)
	var syn *json.SyntaxError
	if errors.As(uerr, &syn) {
		return Rule{}, &apierror.Error{Status: 400, Code: apierror.CodeMalformedJSON,
			Message: "request body is not valid JSON: " + uerr.Error(), Err: uerr}
	}
	if body[0] != '{' {
		return Rule{}, apierror.BadRequest(apierror.CodeMalformedJSON, "", "",
			"request body must be a JSON object (a LoxiLB LoadbalanceEntry)")
	}
	w := keyWalker{data: body}
	if err := w.object(ruleSchema, "", -1); err != nil {
		return Rule{}, err
	}
	if !w.sawServiceArgs {
		return Rule{}, apierror.BadRequest(apierror.CodeInvalidField, fieldServiceArguments,
			fieldServiceArguments+" in body is required",
			"serviceArguments is required: it holds the VIP, port and every rule knob")
	}
	if uerr != nil {
		// The walker type-checks every known field first; this is a backstop.
		return Rule{}, &apierror.Error{Status: 400, Code: apierror.CodeMalformedJSON,
			Message: "rule body does not match the rule model: " + uerr.Error(), Err: uerr}
	}
	clearOutputOnly(&r)
	return r, nil
}

// clearOutputOnly drops the fields GET fills from the running datapath.
func clearOutputOnly(r *Rule) {
	r.Status = nil
	for i := range r.Endpoints {
		r.Endpoints[i].State = ""
		r.Endpoints[i].Counter = ""
	}
}

// valueKind is the JSON shape a model field accepts.
type valueKind uint8

const (
	kindString valueKind = iota
	kindInt
	kindUint32
	kindBool
	kindObject // nested struct (or pointer to one)
	kindArray  // slice of structs
)

type fieldSchema struct {
	kind valueKind
	obj  *objectSchema // kindObject, kindArray
}

// objectSchema is the known-key set of one model struct, derived from its
// json tags so it can never drift from the model.
type objectSchema struct {
	fields map[string]fieldSchema
	names  []string          // for edit-distance suggestions, tag order
	folded map[string]string // case/underscore-folded name → real name
}

// ruleSchema is built once from the model's tags and never mutated.
var (
	ruleSchema        = buildSchema(reflect.TypeFor[Rule]())
	serviceArgsSchema = ruleSchema.fields[fieldServiceArguments].obj
)

func buildSchema(t reflect.Type) *objectSchema {
	o := &objectSchema{fields: map[string]fieldSchema{}, folded: map[string]string{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		var fs fieldSchema
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
		case reflect.Slice:
			if ft.Elem().Kind() != reflect.Struct {
				panic("rules: unsupported slice field " + f.Name)
			}
			fs.kind, fs.obj = kindArray, buildSchema(ft.Elem())
		default:
			panic("rules: unsupported model field kind " + f.Name + " " + ft.Kind().String())
		}
		o.fields[name] = fs
		o.names = append(o.names, name)
		o.folded[foldKey(name)] = name
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

// suggest returns the known key a mistyped key most likely meant, or "".
func (o *objectSchema) suggest(key string) string {
	if n, ok := o.folded[foldKey(key)]; ok {
		return n
	}
	best, bestD := "", len(key)/3+1
	fk := foldKey(key)
	for _, n := range o.names {
		if d := editDistance(fk, foldKey(n)); d < bestD || (d == bestD && best == "" && d <= 2) {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is Levenshtein distance over bytes (keys are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// keyWalker walks syntactically valid JSON (json.Valid has passed) and checks
// every object key and value shape against the schema. Paths are built only
// when reporting an error, so the happy path allocates nothing.
type keyWalker struct {
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

func (w *keyWalker) ws() {
	for w.pos < len(w.data) {
		switch w.data[w.pos] {
		case ' ', '\t', '\n', '\r':
			w.pos++
		default:
			return
		}
	}
}

// object walks the object at w.pos ('{').
func (w *keyWalker) object(o *objectSchema, base string, idx int) error {
	w.pos++ // '{'
	for {
		w.ws()
		if w.data[w.pos] == '}' {
			w.pos++
			return nil
		}
		if w.data[w.pos] == ',' {
			w.pos++
			w.ws()
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
			return unknownField(o, joinPath(base, idx, key), key)
		}
		if fs.obj == serviceArgsSchema && w.data[w.pos] != 'n' {
			w.sawServiceArgs = true
		}
		if err := w.value(fs, base, idx, raw); err != nil {
			return err
		}
	}
}

func unknownField(o *objectSchema, path, key string) error {
	msg := fmt.Sprintf("unknown field %q", path)
	if s := o.suggest(key); s != "" {
		msg += fmt.Sprintf("; did you mean %q? (keys are case-sensitive)", s)
	}
	return apierror.BadRequest(apierror.CodeUnknownField, path, "", msg)
}

// value checks and skips one value for field fs.
func (w *keyWalker) value(fs fieldSchema, base string, idx int, rawKey []byte) error {
	c := w.data[w.pos]
	key := func() string { return unquoteKey(rawKey) }
	if c == 'n' { // null: encoding/json leaves the field at its zero value
		w.pos += 4
		return nil
	}
	typeErr := func(want string) error {
		path := joinPath(base, idx, key())
		got := jsonTypeName(c)
		return apierror.BadRequest(apierror.CodeMalformedJSON, path,
			fmt.Sprintf("%s in body must be of type %s: %q", path, want, got),
			fmt.Sprintf("%s must be a JSON %s, got %s", path, want, got))
	}
	switch fs.kind {
	case kindString:
		if c != '"' {
			w.skip()
			return typeErr("string")
		}
		w.stringRaw()
	case kindBool:
		if c != 't' && c != 'f' {
			w.skip()
			return typeErr("boolean")
		}
		w.skip()
	case kindInt, kindUint32:
		start := w.pos
		w.skip()
		if !isNumberStart(c) {
			return typeErr("integer")
		}
		lit := w.data[start:w.pos]
		if !integerFits(lit, fs.kind == kindUint32) {
			path := joinPath(base, idx, key())
			want := "integer"
			if fs.kind == kindUint32 {
				want = "non-negative 32-bit integer"
			}
			return apierror.BadRequest(apierror.CodeMalformedJSON, path,
				fmt.Sprintf("%s in body must be of type integer: %q", path, string(lit)),
				fmt.Sprintf("%s must be a JSON %s, got %s", path, want, string(lit)))
		}
	case kindObject:
		if c != '{' {
			w.skip()
			return typeErr("object")
		}
		return w.object(fs.obj, joinPath(base, idx, key()), -1)
	case kindArray:
		if c != '[' {
			w.skip()
			return typeErr("array")
		}
		return w.array(fs.obj, joinPath(base, idx, key()))
	}
	return nil
}

func (w *keyWalker) array(o *objectSchema, path string) error {
	w.pos++ // '['
	for i := 0; ; i++ {
		w.ws()
		if w.data[w.pos] == ']' {
			w.pos++
			return nil
		}
		if w.data[w.pos] == ',' {
			w.pos++
			w.ws()
		}
		switch w.data[w.pos] {
		case '{':
			if err := w.object(o, path, i); err != nil {
				return err
			}
		case 'n':
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

// stringRaw consumes a string literal and returns its content without quotes
// (still escaped).
func (w *keyWalker) stringRaw() []byte {
	w.pos++ // opening quote
	start := w.pos
	for {
		switch w.data[w.pos] {
		case '\\':
			w.pos += 2
			continue
		case '"':
			s := w.data[start:w.pos]
			w.pos++
			return s
		}
		w.pos++
	}
}

// unquoteKey decodes JSON escapes in a key (rare: `"kv\u0045xactMode"`).
func unquoteKey(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	var s string
	quoted := make([]byte, 0, len(raw)+2)
	quoted = append(append(append(quoted, '"'), raw...), '"')
	if err := json.Unmarshal(quoted, &s); err != nil {
		return string(raw)
	}
	return s
}

// skip consumes one complete value of any type.
func (w *keyWalker) skip() {
	switch c := w.data[w.pos]; c {
	case '"':
		w.stringRaw()
	case '{', '[':
		depth := 0
		for {
			switch w.data[w.pos] {
			case '"':
				w.stringRaw()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					w.pos++
					return
				}
			}
			w.pos++
		}
	default: // number, true, false, null
		for w.pos < len(w.data) {
			switch w.data[w.pos] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			w.pos++
		}
	}
}

func isNumberStart(c byte) bool { return c == '-' || ('0' <= c && c <= '9') }

// integerFits reports whether a JSON number literal decodes into an int
// (or a uint32) the way encoding/json would, i.e. without a fraction or
// exponent and without overflow.
func integerFits(lit []byte, unsigned32 bool) bool {
	if bytes.ContainsAny(lit, ".eE") {
		return false
	}
	if unsigned32 {
		_, err := strconv.ParseUint(string(lit), 10, 32)
		return err == nil
	}
	if len(lit) <= 18 { // always fits in int64
		return true
	}
	_, err := strconv.ParseInt(string(lit), 10, 64)
	return err == nil
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
