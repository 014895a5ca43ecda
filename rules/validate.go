package rules

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/go-playground/validator/v10"
	"github.com/infergate/infergate/apierror"
)

// Validate runs the field pass (go-playground/validator rules kept in this
// file as map rules, so the wire model stays free of validation tags) and
// then the ordered cross-field pass (crossChecks). The first failure is
// returned as an *apierror.Error whose Field is the LoxiLB JSON path and whose
// Result is LoxiLB's error text where LoxiLB has one.
func Validate(r Rule) error {
	if err := fieldPass(&r); err != nil {
		return err
	}
	return crossPass(&r)
}

// Field rules in validator syntax, keyed by Go field name. Bounds are the
// reference's §2 ranges; "0 = default" fields allow 0. Limits that LoxiLB
// leaves open (probe timeout/retries, stream durations, block size) get
// generous sane caps so a typo cannot become a silent misconfiguration.
var (
	ruleFieldRules = map[string]string{
		"Endpoints":      "min=1,max=32,dive",
		"SecondaryIPs":   "dive",
		"AllowedSources": "dive",
	}
	serviceFieldRules = map[string]string{
		"ExternalIP":                  "required,iplit",
		"Port":                        "min=1,max=65535",
		"PortMax":                     "min=0,max=65535",
		"Sel":                         "min=0,max=10",
		"Mode":                        "min=0,max=5",
		"Security":                    "min=0,max=2",
		"InactiveTimeOut":             "min=0,max=86400",
		"ProbePort":                   "min=0,max=65535",
		"ProbeTimeout":                "min=0,max=3600",
		"ProbeRetries":                "min=0,max=100",
		"Oper":                        "min=0,max=2",
		"MaxStreamDurationSec":        "min=0,max=604800",
		"BackendKeepaliveIntervalSec": "min=0,max=86400",
		"CHWBLPrefixHashLevel":        "omitempty,min=1,max=3",
		"CHWBLPrefixHashFlags":        "omitempty,min=0,max=255",
		"CHWBLMeanLoadFactor":         "omitempty,min=100,max=300",
		"CHWBLReplication":            "omitempty,min=1,max=1024",
		"PDSessionTTLSec":             "min=0,max=604800",
		"PDCacheThreshold":            "min=0,max=100",
		"PDBalanceAbsThreshold":       "min=0,max=255",
		"PDBootstrapPort":             "min=0,max=65535",
		"PDPairingMode":               "omitempty,oneof=lenient strict",
		"PDPrefillPolicy":             "omitempty,oneof=least_load round_robin power_of_two cache_aware",
		"PDDecodePolicy":              "omitempty,oneof=least_load round_robin power_of_two",
		"KVExactMode":                 "min=0,max=3",
		"KVEngineType":                "omitempty,oneof=vllm sglang trtllm llamacpp",
		"KVZmqPort":                   "min=0,max=65535",
		"KVBlockSize":                 "min=0,max=1024",
		"KVHashAlgo":                  "omitempty,oneof=sha256_cbor xxhash_cbor sha256_sglang blockhash_trtllm",
		"KVDpRankCount":               "min=0,max=8",
		"KVWarmupSec":                 "min=0,max=86400",
		"ConnectionLimit":             "min=0,max=10000000",
		"AdmissionWindow":             "min=0,max=65536",
		"MaxModelLen":                 "min=0,max=16777216",
	}
	endpointFieldRules = map[string]string{
		"EndpointIP": "required,iplit",
		"TargetPort": "min=1,max=65535",
		"Weight":     "min=0,max=255",
		"EPRole":     "min=0,max=2",
		"NixlPort":   "min=0,max=65535",
		// P/D pairing facts (pairing.go checks their spelling).
		"KVBlockSize":   "min=0,max=4096",
		"BootstrapPort": "min=0,max=65535",
		// Admission window (the datapath's flow gate).
		"AdmissionWindow": "min=0,max=65536",
		// Context window (datapath's context-length check).
		"MaxModelLen": "min=0,max=16777216",
	}
	secondaryIPFieldRules   = map[string]string{"SecondaryIP": "required"}
	allowedSourceFieldRules = map[string]string{"Prefix": "required,cidr"}
)

// LoxiLB result texts for field failures that have one (reference §3.1),
// keyed by field path with indices removed. Others get go-openapi's text.
var fieldResults = map[string]string{
	fieldServiceArguments + "." + fieldExternalIP:      "malformed-service error",
	fieldServiceArguments + "." + fieldInactiveTimeOut: "service-args error",
	fieldServiceArguments + "." + fieldProbePort:       "malformed-service-pport error",
	fieldServiceArguments + "." + fieldKVEngineType:    `kv-engine-type must be one of "vllm", "sglang", "trtllm", "llamacpp"`,
	fieldServiceArguments + "." + fieldKVDpRankCount:   "kv-dp-rank-count must be within 1..8 (0 = default 1)",
	fieldServiceArguments + "." + fieldKVHashAlgo:      `kv-hash-algo must be one of "sha256_cbor", "xxhash_cbor", "sha256_sglang", "blockhash_trtllm"`,
	fieldEndpoints:                             "endpoints-range error",
	fieldEndpoints + "." + fieldEndpointIP:     "malformed-lbep error",
	fieldSecondaryIPs + "." + fieldSecondaryIP: "malformed-secIP error",
}

// fieldValidator is built once; validator.Validate is safe for concurrent
// use and its internal struct cache is not observable state.
var fieldValidator = sync.OnceValue(func() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		return name
	})
	if err := v.RegisterValidation("iplit", func(fl validator.FieldLevel) bool {
		_, ok := ParseIPLiteral(fl.Field().String())
		return ok
	}); err != nil {
		panic(err)
	}
	v.RegisterStructValidationMapRules(ruleFieldRules, Rule{})
	v.RegisterStructValidationMapRules(serviceFieldRules, ServiceArguments{})
	v.RegisterStructValidationMapRules(endpointFieldRules, Endpoint{})
	v.RegisterStructValidationMapRules(secondaryIPFieldRules, SecondaryIP{})
	v.RegisterStructValidationMapRules(allowedSourceFieldRules, AllowedSource{})
	return v
})

// ParseIPLiteral parses an IP literal the way LoxiLB's net.ParseIP accepts
// it (no IPv6 zone), stripping IPv6 brackets and unmapping IPv4-mapped IPv6
// so "::ffff:10.0.0.1" and "10.0.0.1" are the same VIP everywhere (keys,
// lookups, duplicate checks). The API's path parsing and the client and CLI
// comparisons call it too, so every layer agrees on what one address is.
func ParseIPLiteral(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(stripBrackets(s))
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func stripBrackets(s string) string {
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		return s[1 : len(s)-1]
	}
	return s
}

func fieldPass(r *Rule) error {
	err := fieldValidator().Struct(r)
	if err == nil {
		return nil
	}
	var ves validator.ValidationErrors
	if errors.As(err, &ves) && r.EndpointSelector != nil { // no static endpoints needed
		ves = slices.DeleteFunc(ves, func(fe validator.FieldError) bool {
			return fe.Field() == fieldEndpoints && fe.Tag() == "min"
		})
		if len(ves) == 0 {
			return nil
		}
	}
	if len(ves) == 0 {
		return &apierror.Error{Status: 500, Code: apierror.CodeInternal,
			Message: "rule validation failed unexpectedly", Err: err}
	}
	return fieldError(ves[0])
}

// fieldError maps one validator failure to the API error, in go-openapi's
// wording (`serviceArguments.kvExactMode in body should be less than or equal
// to 3`) with LoxiLB's result text where LoxiLB has one.
func fieldError(fe validator.FieldError) *apierror.Error {
	ns := fe.Namespace()
	if _, rest, ok := strings.Cut(ns, "."); ok { // drop the root type name
		ns = rest
	}
	isList := fe.Kind() == reflect.Slice
	var msg string
	switch fe.Tag() {
	case "required":
		msg = ns + " in body is required"
	case "min":
		if isList {
			msg = fmt.Sprintf("%s in body should have at least %s items", ns, fe.Param())
		} else {
			msg = fmt.Sprintf("%s in body should be greater than or equal to %s", ns, fe.Param())
		}
	case "max":
		if isList {
			msg = fmt.Sprintf("%s in body should have at most %s items", ns, fe.Param())
		} else {
			msg = fmt.Sprintf("%s in body should be less than or equal to %s", ns, fe.Param())
		}
	case "oneof":
		msg = fmt.Sprintf("%s in body should be one of [%s]", ns, fe.Param())
	case "iplit":
		msg = fmt.Sprintf("%s in body must be of type ip-address: %q", ns, fmt.Sprint(fe.Value()))
	case "cidr":
		msg = fmt.Sprintf("%s in body must be of type cidr: %q", ns, fmt.Sprint(fe.Value()))
	default:
		msg = fmt.Sprintf("%s in body failed %s validation", ns, fe.Tag())
	}
	result, ok := fieldResults[stripIndices(ns)]
	if !ok {
		result = msg
	}
	return apierror.BadRequest(apierror.CodeInvalidField, ns, result, msg)
}

// stripIndices turns "endpoints[3].endpointIP" into "endpoints.endpointIP".
func stripIndices(p string) string {
	if strings.IndexByte(p, '[') < 0 {
		return p
	}
	var b strings.Builder
	skip := false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '[':
			skip = true
		case c == ']':
			skip = false
		case !skip:
			b.WriteByte(c)
		}
	}
	return b.String()
}
