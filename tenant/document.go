package tenant

// Decoding of the spec of kind: ApiKey and kind: TenantLimit YAML documents
// (rules.LoadFiles hands them over as JSON). Strict: an unknown field is an
// error, and a raw secret is refused so it never sits in a repository.

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strings"

	"github.com/infergate/infergate/apierror"
)

// Document kinds this package reads.
const (
	KindAPIKey      = "ApiKey"
	KindTenantLimit = "TenantLimit"
)

// CodeSecretInFile: a kind: ApiKey document holds a raw key.
const CodeSecretInFile = "secret_in_file"

// secretFields are spellings of a raw key that a document must not carry.
var secretFields = []string{"raw_key", "key", "api_key", "secret", "rawKey", "apiKey"}

// DecodeKeyDocument reads the spec of a kind: ApiKey document: an import
// (key_id + key_hash) with the settings of KeySpec, validated as a POST is.
func DecodeKeyDocument(spec []byte) (KeySpec, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(spec, &raw); err != nil {
		return KeySpec{}, apierror.BadRequest(apierror.CodeMalformedJSON, "spec", "malformed", "spec must be a mapping: "+err.Error())
	}
	for _, f := range secretFields {
		if _, ok := raw[f]; ok {
			return KeySpec{}, apierror.BadRequest(CodeSecretInFile, "spec."+f, "raw key in file",
				"a kind: ApiKey document must not hold the raw key ("+f+"): commit only key_id and key_hash from `infergate apikey mint` and hand the raw key to the client")
		}
	}
	var s KeySpec
	if err := strictDecode(spec, &s, []string{FieldTenantID, FieldName, FieldAllowedModels, FieldRateLimitRPS,
		FieldBurstSize, FieldTokensPerMin, FieldEnabled, FieldExpiresAt, FieldMaxPriority, FieldKeyID, FieldKeyHash}); err != nil {
		return KeySpec{}, err
	}
	if err := s.validate(); err != nil {
		return KeySpec{}, prefixField(err)
	}
	if s.KeyID == "" {
		return KeySpec{}, prefixField(needHash())
	}
	return s, nil
}

// DecodeTenantLimitDocument reads the spec of a kind: TenantLimit document.
func DecodeTenantLimitDocument(spec []byte) (TenantLimit, error) {
	var t TenantLimit
	if err := strictDecode(spec, &t, []string{FieldTenantID, FieldRPS, FieldTokensPerMin}); err != nil {
		return TenantLimit{}, err
	}
	if err := t.validate(); err != nil {
		return TenantLimit{}, prefixField(err)
	}
	return t, nil
}

// strictDecode decodes data into v, naming an unknown field (and the
// known ones) in a 400.
func strictDecode(data []byte, v any, known []string) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return apierror.BadRequest(apierror.CodeMalformedJSON, "spec", "malformed", "spec must be a mapping: "+err.Error())
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !containsString(known, k) {
			return apierror.BadRequest(apierror.CodeUnknownField, "spec."+k, "unknown field",
				"unknown field "+k+" (known: "+strings.Join(known, ", ")+")")
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		field := "spec"
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			field += "." + te.Field
		}
		return apierror.BadRequest(apierror.CodeMalformedJSON, field, "malformed", "wrong type: "+err.Error())
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// prefixField makes a validation error's field a path in the document.
func prefixField(e *apierror.Error) *apierror.Error {
	c := *e
	if c.Field != "" {
		c.Field = "spec." + c.Field
	}
	return &c
}
