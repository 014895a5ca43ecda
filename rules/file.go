package rules

// YAML rule files in LoxiLB's loxicmd `kind: Loadbalancer` format. Each
// document is translated to the REST JSON body and decoded with DecodeJSON,
// so a file and a POST reject exactly the same mistakes with the same
// apierror (status, code, field).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/infergate/infergate/apierror"
	"gopkg.in/yaml.v3"
)

// Top-level and metadata keys of a rule document.
const (
	docKeyAPIVersion = "apiVersion"
	docKeyKind       = "kind"
	docKeyMetadata   = "metadata"
	docKeySpec       = "spec"

	metaKeyName     = "name"
	metaKeyBlock    = "block"
	metaKeyBGP      = "bgp"
	metaKeyHostname = "hostname" // loxicmd: accepted and ignored
	metaKeyVID      = "vid"      // loxicmd: accepted and ignored
	metaKeyVxlanID  = "vxlanID"  // loxicmd: accepted and ignored
	metaKeyLabels   = "labels"   // free-form, ignored

	specKeyServiceArguments = "serviceArguments"

	saKeyName  = "name"
	saKeyBlock = "block"
	saKeyBGP   = "bgp"
)

// Accepted apiVersion values (LoxiLB's and ours) and loxicmd's kind
// spellings (case-sensitive, as loxicmd checks them).
const (
	apiVersionLoxiLB    = "netlox/v1"
	apiVersionInfergate = "infergate/v1"
	kindLoadbalancer    = "Loadbalancer"
	kindLB              = "lb"
	kindLBUpper         = "LB"
)

// loxicmdAlias maps loxicmd's yaml tag spellings of serviceArguments keys
// to the REST JSON names. loxicmd files use them, so we must read them.
func loxicmdAlias(key string) (jsonName string, ok bool) {
	switch key {
	case "path":
		return "host", true
	case "portmax":
		return "portMax", true
	case "Monitor":
		return "monitor", true
	case "BGP":
		return "bgp", true
	}
	return "", false
}

// Document is one document read from a YAML rule file: a rule (Kind
// Loadbalancer, Rule set) or a tenant-control document (Kind ApiKey or
// TenantLimit, Spec holding its spec as JSON for the tenant package).
type Document struct {
	Source string // "path/file.yaml#2" (1-based document index)
	Kind   string // KindLoadbalancer, KindAPIKey or KindTenantLimit
	Rule   Rule
	Spec   []byte // non-rule kinds only
}

// IsRule reports whether d is a kind: Loadbalancer rule.
func (d Document) IsRule() bool { return d.Kind == KindLoadbalancer }

// Kinds of documents that rule files may hold besides rules. The rules
// package only carries them; the tenant package decodes and applies them.
const (
	KindLoadbalancer = kindLoadbalancer
	KindAPIKey       = "ApiKey"
	KindTenantLimit  = "TenantLimit"
	// apiVersionInfergateIO is what `infergate apikey mint` prints.
	apiVersionInfergateIO = "infergate.io/v1"
)

func isTenantKind(k any) bool { return k == KindAPIKey || k == KindTenantLimit }

// LoadFiles reads one YAML file or every *.yaml/*.yml in a directory
// (sorted, not recursive), each holding one or many `kind: Loadbalancer`
// documents in LoxiLB's loxicmd format, and returns the rules in order.
// The first bad document fails the whole load so a typo never leads to a
// half-applied file. Errors carry the source ("file.yaml#2") and keep the
// *apierror.Error of the document in their chain.
func LoadFiles(path string) ([]Document, error) {
	files, err := ruleFiles(path)
	if err != nil {
		return nil, err
	}
	var docs []Document
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read rule file: %w", err)
		}
		bodies, err := DocumentBodies(f, data)
		if err != nil {
			return nil, err
		}
		for _, b := range bodies {
			if b.Kind != KindLoadbalancer {
				docs = append(docs, Document{Source: b.Source, Kind: b.Kind, Spec: b.JSON})
				continue
			}
			r, err := DecodeJSON(b.JSON)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", b.Source, err)
			}
			docs = append(docs, Document{Source: b.Source, Kind: KindLoadbalancer, Rule: r})
		}
	}
	return docs, nil
}

// ruleFiles expands path to the rule files it names.
func ruleFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rule file: %w", err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("rule directory: %w", err)
	}
	var files []string
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.Type().IsRegular() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	sort.Strings(files)
	return files, nil
}

// DocumentBody is one non-empty document of a rule file as a REST JSON body.
type DocumentBody struct {
	Source string // "file.yaml#2"
	Kind   string // KindLoadbalancer (any loxicmd spelling), KindAPIKey, KindTenantLimit
	JSON   []byte
}

// DocumentBodies splits a YAML rule file into documents, checks each
// envelope (apiVersion, kind, metadata) and translates its spec into the
// REST JSON body. name is used for the Source of each document. Empty
// documents are skipped but still counted, so "#n" always matches the
// n-th document in the file.
func DocumentBodies(name string, data []byte) ([]DocumentBody, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []DocumentBody
	for idx := 1; ; idx++ {
		source := name + "#" + strconv.Itoa(idx)
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, malformed("", "YAML syntax error: "+err.Error()))
		}
		if isEmptyDocument(&node) {
			continue
		}
		var doc any
		if err := node.Decode(&doc); err != nil {
			return nil, fmt.Errorf("%s: %w", source, malformed("", "YAML decode error: "+err.Error()))
		}
		kind := KindLoadbalancer
		var body []byte
		if top, ok := doc.(map[string]any); ok && isTenantKind(top[docKeyKind]) {
			kind = top[docKeyKind].(string)
			body, err = tenantDocumentJSON(top)
		} else {
			body, err = documentJSON(doc)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		out = append(out, DocumentBody{Source: source, Kind: kind, JSON: body})
	}
}

// isEmptyDocument reports a document holding nothing but comments or null.
func isEmptyDocument(n *yaml.Node) bool {
	if n.Kind == 0 {
		return true
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return true
		}
		c := n.Content[0]
		return c.Kind == yaml.ScalarNode && c.Tag == "!!null"
	}
	return false
}

// documentJSON checks the envelope of one decoded document and returns its
// spec as the REST body.
func documentJSON(doc any) ([]byte, error) {
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, malformed("", "a rule document must be a mapping with apiVersion, kind, metadata and spec")
	}
	for k := range top {
		switch k {
		case docKeyAPIVersion, docKeyKind, docKeyMetadata, docKeySpec:
		default:
			return nil, unknownKey(k, "", []string{docKeyAPIVersion, docKeyKind, docKeyMetadata, docKeySpec})
		}
	}
	if err := checkAPIVersion(top[docKeyAPIVersion]); err != nil {
		return nil, err
	}
	if err := checkKind(top[docKeyKind]); err != nil {
		return nil, err
	}
	spec, ok := top[docKeySpec].(map[string]any)
	if !ok {
		return nil, apierror.BadRequest(apierror.CodeInvalidField, docKeySpec, "malformed-service error",
			"spec must be a mapping holding serviceArguments and endpoints")
	}
	sa, ok := spec[specKeyServiceArguments].(map[string]any)
	if !ok && spec[specKeyServiceArguments] != nil {
		// DecodeJSON reports the wrong type with its own field path.
		return marshalBody(spec)
	}
	if sa == nil {
		sa = map[string]any{}
		spec[specKeyServiceArguments] = sa
	}
	if err := translateAliases(sa); err != nil {
		return nil, err
	}
	if err := applyMetadata(top[docKeyMetadata], sa); err != nil {
		return nil, err
	}
	return marshalBody(spec)
}

// tenantDocumentJSON checks the envelope of a kind: ApiKey or TenantLimit
// document and returns its spec as JSON; the tenant package checks the
// spec itself. metadata (e.g. labels) is allowed and ignored.
func tenantDocumentJSON(top map[string]any) ([]byte, error) {
	for k := range top {
		switch k {
		case docKeyAPIVersion, docKeyKind, docKeyMetadata, docKeySpec:
		default:
			return nil, unknownKey(k, "", []string{docKeyAPIVersion, docKeyKind, docKeyMetadata, docKeySpec})
		}
	}
	if v := top[docKeyAPIVersion]; v != apiVersionInfergate && v != apiVersionInfergateIO {
		return nil, apierror.BadRequest(apierror.CodeInvalidField, docKeyAPIVersion, "malformed document",
			fmt.Sprintf("apiVersion %q is not supported for kind %v (want %s or %s)", fmt.Sprint(nilToEmpty(v)), top[docKeyKind], apiVersionInfergate, apiVersionInfergateIO))
	}
	if md, ok := top[docKeyMetadata]; ok && md != nil {
		if _, ok := md.(map[string]any); !ok {
			return nil, apierror.BadRequest(apierror.CodeInvalidField, docKeyMetadata, "malformed document", "metadata must be a mapping")
		}
	}
	spec, ok := top[docKeySpec].(map[string]any)
	if !ok {
		return nil, apierror.BadRequest(apierror.CodeInvalidField, docKeySpec, "malformed document",
			fmt.Sprintf("a kind %v document needs a spec mapping", top[docKeyKind]))
	}
	return marshalBody(spec)
}

func checkAPIVersion(v any) error {
	s, _ := v.(string)
	if s == apiVersionLoxiLB || s == apiVersionInfergate {
		return nil
	}
	return apierror.BadRequest(apierror.CodeInvalidField, docKeyAPIVersion, "malformed-service error",
		fmt.Sprintf("apiVersion %q is not supported (want %s or %s)", fmt.Sprint(nilToEmpty(v)), apiVersionLoxiLB, apiVersionInfergate))
}

func checkKind(v any) error {
	s, _ := v.(string)
	if s == kindLoadbalancer || s == kindLB || s == kindLBUpper {
		return nil
	}
	msg := fmt.Sprintf("kind %q is not a rule kind (want %s, %s or %s; or %s, %s)", fmt.Sprint(nilToEmpty(v)), kindLoadbalancer, kindLB, kindLBUpper, KindAPIKey, KindTenantLimit)
	if strings.EqualFold(s, kindLoadbalancer) || strings.EqualFold(s, kindLB) {
		msg += fmt.Sprintf("; did you mean %q?", kindLoadbalancer)
	}
	return apierror.BadRequest(apierror.CodeInvalidField, docKeyKind, "malformed-service error", msg)
}

// translateAliases rewrites loxicmd's yaml spellings to the JSON names. A
// document that uses both spellings of one key is ambiguous and rejected.
func translateAliases(sa map[string]any) error {
	keys := make([]string, 0, len(sa))
	for k := range sa {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic error when several aliases clash
	for _, from := range keys {
		to, ok := loxicmdAlias(from)
		if !ok {
			continue
		}
		v := sa[from]
		if _, dup := sa[to]; dup {
			return apierror.BadRequest(apierror.CodeInvalidCombo, "serviceArguments."+from, "malformed-service error",
				fmt.Sprintf("%q is loxicmd's spelling of %q; set only one of them", from, to))
		}
		delete(sa, from)
		sa[to] = v
	}
	return nil
}

// applyMetadata folds loxicmd's metadata into serviceArguments: block and
// bgp are rule fields there, name labels the rule when the spec has none.
func applyMetadata(v any, sa map[string]any) error {
	if v == nil {
		return nil
	}
	md, ok := v.(map[string]any)
	if !ok {
		return apierror.BadRequest(apierror.CodeInvalidField, docKeyMetadata, "malformed-service error",
			"metadata must be a mapping")
	}
	for k, val := range md {
		var target string
		switch k {
		case metaKeyName:
			target = saKeyName
		case metaKeyBlock:
			target = saKeyBlock
		case metaKeyBGP:
			target = saKeyBGP
		case metaKeyHostname, metaKeyVID, metaKeyVxlanID, metaKeyLabels:
			continue
		default:
			return unknownKey(k, docKeyMetadata+".",
				[]string{metaKeyName, metaKeyBlock, metaKeyBGP, metaKeyHostname, metaKeyVID, metaKeyVxlanID, metaKeyLabels})
		}
		cur, set := sa[target]
		if !set {
			sa[target] = val
			continue
		}
		if fmt.Sprint(cur) != fmt.Sprint(val) {
			return apierror.BadRequest(apierror.CodeInvalidCombo, docKeyMetadata+"."+k, "malformed-service error",
				fmt.Sprintf("metadata.%s (%v) conflicts with spec.serviceArguments.%s (%v)", k, val, target, cur))
		}
	}
	return nil
}

// marshalBody renders the translated spec as JSON. yaml.v3 yields
// map[string]any for string-keyed mappings; anything else (e.g. a numeric
// key) has no JSON form and is a malformed body.
func marshalBody(spec map[string]any) ([]byte, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, malformed("", "spec cannot be expressed as a JSON rule body: "+err.Error())
	}
	return b, nil
}

func malformed(field, msg string) *apierror.Error {
	return apierror.New(http.StatusBadRequest, apierror.CodeMalformedJSON, field, "malformed-service error", msg)
}

func unknownKey(key, prefix string, known []string) *apierror.Error {
	msg := fmt.Sprintf("unknown key %q", key)
	for _, k := range known {
		if strings.EqualFold(k, key) {
			msg += fmt.Sprintf("; did you mean %q?", k)
			break
		}
	}
	return apierror.BadRequest(apierror.CodeUnknownField, prefix+key, "malformed-service error", msg)
}

func nilToEmpty(v any) any {
	if v == nil {
		return ""
	}
	return v
}
