package swagger

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/infergate/infergate/rules"
)

type view struct {
	A string            `json:"a"`
	M map[string]string `json:"m"`
}

func testViews() Views { return Views{Result: view{}, Error: view{}, Compiled: view{}, Status: view{}} }

// TestFieldNotesMatchModel fails when an annotation names a field that was
// renamed or removed, so hand-written docs cannot silently detach.
func TestFieldNotesMatchModel(t *testing.T) {
	g := newGenerator(wireNames(), fieldNotes())
	buildDocument(g, testViews())
	var stale []string
	for k := range fieldNotes() {
		if !g.used[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("annotations for fields not in the model: %v", stale)
	}
}

// TestDefinitionsMirrorJSONTags checks every JSON field of the wire model is
// a property of its definition (reflection is the point; this guards it).
func TestDefinitionsMirrorJSONTags(t *testing.T) {
	d := Document(testViews())
	for typ, name := range wireNames() {
		def, ok := d.Definitions[name]
		if !ok {
			t.Errorf("no definition %s for %s", name, typ)
			continue
		}
		for i := 0; i < typ.NumField(); i++ {
			tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			if _, ok := def.Properties[tag]; !ok {
				t.Errorf("%s lacks property %q", name, tag)
			}
		}
	}
	sa := d.Definitions[defServiceArgs]
	tests := []struct {
		prop  string
		check func(*Schema) bool
		want  string
	}{
		{"kvExactMode", func(s *Schema) bool { return len(s.Enum) > 0 && s.Description != "" }, "enum + description"},
		{"pd_cache_threshold", func(s *Schema) bool { return s.Maximum != nil && *s.Maximum == 100 }, "maximum 100"},
		{"chwbl_prefix_hash_level", func(s *Schema) bool { return s.Nullable && s.Type == "integer" }, "nullable integer (*int)"},
		{"block", func(s *Schema) bool { return s.Minimum != nil && *s.Minimum == 0 && s.Format == "int64" }, "uint32 bounds"},
	}
	for _, tc := range tests {
		if s := sa.Properties[tc.prop]; s == nil || !tc.check(s) {
			t.Errorf("%s schema = %+v, want %s", tc.prop, s, tc.want)
		}
	}
	if got := strings.Join(sa.Required, ","); got != "externalIP,port,protocol" {
		t.Errorf("serviceArguments required = %q", got)
	}
}

// TestRefsResolve walks the rendered document: every $ref must name a
// definition, or the UI renders an error instead of the model.
func TestRefsResolve(t *testing.T) {
	b, err := json.Marshal(Document(testViews()))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	defs, _ := doc["definitions"].(map[string]any)
	var refs int
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["$ref"].(string); ok {
				refs++
				name := strings.TrimPrefix(r, "#/definitions/")
				if _, ok := defs[name]; !ok {
					t.Errorf("dangling $ref %s", r)
				}
				if len(x) != 1 {
					t.Errorf("$ref %s has siblings (invalid in swagger 2.0): %v", r, x)
				}
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(doc["paths"])
	walk(defs)
	if refs < 10 {
		t.Errorf("only %d $refs found; document looks empty", refs)
	}
	if doc["swagger"] != "2.0" || doc["basePath"] != BasePath {
		t.Errorf("header = %v %v", doc["swagger"], doc["basePath"])
	}
}

func TestExamplesAreNamedAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, ex := range Examples() {
		var r rules.Rule
		if err := json.Unmarshal(ex.Body, &r); err != nil || seen[ex.Name] {
			t.Errorf("example %q: duplicate or not JSON: %v", ex.Name, err)
		}
		seen[ex.Name] = true
	}
	if Examples()[0].Name != "vllm-pd-1p1d" {
		t.Errorf("canonical example = %s, want vllm-pd-1p1d", Examples()[0].Name)
	}
	if reflect.DeepEqual(Examples()[0].Body, Examples()[1].Body) {
		t.Error("examples are identical")
	}
}

// TestExamplesServeOnADefaultDaemon: Swagger UI pre-fills the POST body with
// the canonical example, and a new user's first "Try it out" executes it as
// is. Creating a rule binds its VIP, which a daemon without --bind-any-vip
// can do only for a local address, so every example uses loopback addresses
// (as configs/ does) and its own VIP:port, so all of them can be created on
// one daemon.
func TestExamplesServeOnADefaultDaemon(t *testing.T) {
	vips := map[netip.AddrPort]string{}
	for _, ex := range Examples() {
		var r rules.Rule
		if err := json.Unmarshal(ex.Body, &r); err != nil {
			t.Fatalf("example %q: %v", ex.Name, err)
		}
		addrs := []string{r.ServiceArguments.ExternalIP}
		for _, ep := range r.Endpoints {
			addrs = append(addrs, ep.EndpointIP)
		}
		for _, a := range addrs {
			ip, err := netip.ParseAddr(a)
			if err != nil || !ip.IsLoopback() {
				t.Errorf("example %q: address %q is not a loopback address (err %v)", ex.Name, a, err)
			}
		}
		vip, err := netip.ParseAddr(r.ServiceArguments.ExternalIP)
		if err != nil {
			continue
		}
		key := netip.AddrPortFrom(vip, uint16(r.ServiceArguments.Port))
		if other, dup := vips[key]; dup {
			t.Errorf("examples %q and %q share VIP %s", other, ex.Name, key)
		}
		vips[key] = ex.Name
	}
}
