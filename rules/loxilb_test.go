package rules

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// Bodies as LoxiLB's clients send them decode, validate and compile.
func TestLoxiLBFixturesAccepted(t *testing.T) {
	for _, name := range []string{"loxicmd_create_lb.json", "loxilb_get_dump.json", "octavia_full.json"} {
		t.Run(name, func(t *testing.T) {
			r, err := DecodeJSON(readTestdata(t, "loxilb/"+name))
			if err != nil {
				t.Fatalf("DecodeJSON: %v", err)
			}
			if _, err := Compile(r); err != nil {
				t.Fatalf("Compile: %v", err)
			}
		})
	}
}

func TestLoxiLBFieldsDecoded(t *testing.T) {
	r, err := DecodeJSON(readTestdata(t, "loxilb/octavia_full.json"))
	if err != nil {
		t.Fatal(err)
	}
	sa := r.ServiceArguments
	if sa.AdminStateUp == nil || *sa.AdminStateUp || sa.Annotations["listener"] != "l-1" || sa.ProjectID != "p-1" {
		t.Errorf("service args: %+v", sa)
	}
	if len(r.SecondaryVIPs) != 1 || r.SecondaryVIPs[0] != (SecondaryVIP{Address: "192.0.2.31", SubnetID: "s-1", PortID: "p-9", Proto: "tcp"}) {
		t.Errorf("secondaryVIPs: %+v", r.SecondaryVIPs)
	}
	c, err := Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	if !c.AdminDown || len(c.SecondaryVIPs) != 1 || c.SecondaryVIPs[0].String() != "192.0.2.31" {
		t.Errorf("compiled admin/secondary: %v %v", c.AdminDown, c.SecondaryVIPs)
	}
	p := c.Endpoints[0].Probe
	if p == nil || p.Method != "HEAD" || p.Request != "/ready" || !p.Codes.Accepts(202) || p.Codes.Accepts(201) || p.Codes.Accepts(204) {
		t.Errorf("endpoint probe: %+v", p)
	}
}

// Keys match in any letter case (LoxiLB's encoding/json does), but one
// field twice is refused; misspellings keep their did-you-mean.
func TestDecodeCaseInsensitive(t *testing.T) {
	const ep = `"endpoints":[{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1}]`
	ok := []struct {
		name, sa string
		check    func(ServiceArguments) bool
	}{
		{"loxicmd BGP/Monitor", `"BGP":false,"Monitor":true`, func(s ServiceArguments) bool { return s.Monitor && !s.BGP }},
		{"scripts inactiveTimeout", `"inactiveTimeout":30`, func(s ServiceArguments) bool { return s.InactiveTimeOut == 30 }},
		{"upper externalip", `"EXTERNALIP":"10.0.0.9"`, func(s ServiceArguments) bool { return s.ExternalIP == "10.0.0.9" }},
		{"mixed kv", `"KvExactMode":3`, func(s ServiceArguments) bool { return s.KVExactMode == 3 }},
		{"adminstateup", `"adminstateup":false`, func(s ServiceArguments) bool { return s.AdminStateUp != nil && !*s.AdminStateUp }},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"serviceArguments":{"externalIP":"10.0.0.1","port":80,"protocol":"tcp","mode":4,` + tc.sa + `},` + ep + `}`
			if strings.Contains(strings.ToLower(tc.sa), "externalip") {
				body = `{"serviceArguments":{"port":80,"protocol":"tcp","mode":4,` + tc.sa + `},` + ep + `}`
			}
			r, err := DecodeJSON([]byte(body))
			if err != nil {
				t.Fatalf("DecodeJSON: %v", err)
			}
			if !tc.check(r.ServiceArguments) {
				t.Errorf("decoded %+v", r.ServiceArguments)
			}
			// encoding/json (LoxiLB's decoder) reads the same rule.
			var want Rule
			if err := json.Unmarshal([]byte(body), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r, want) {
				t.Errorf("differs from encoding/json:\n got %+v\nwant %+v", r, want)
			}
		})
	}
	bad := []struct {
		name, body, code, field, msg string
	}{
		{"two casings", `{"serviceArguments":{"monitor":true,"Monitor":false},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.monitor", `given again as "Monitor"`},
		{"two casings endpoint", `{"serviceArguments":{},"endpoints":[{"weight":1,"Weight":2}]}`,
			apierror.CodeMalformedJSON, "endpoints[0].weight", "case-insensitively"},
		{"snake kv still a typo", `{"serviceArguments":{"kv_exact_mode":1},` + ep + `}`,
			apierror.CodeUnknownField, "serviceArguments.kv_exact_mode", `did you mean "kvExactMode"`},
		{"adminStateUp wrong type", `{"serviceArguments":{"adminStateUp":"false"},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.adminStateUp", "boolean"},
		{"annotation not a string", `{"serviceArguments":{"annotations":{"a":1}},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.annotations.a", "string"},
		{"annotation duplicate", `{"serviceArguments":{"annotations":{"a":"x","a":"y"}},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.annotations.a", "duplicate"},
		{"unsupported twice", `{"serviceArguments":{"kvModelProfile":"","KVMODELPROFILE":""},` + ep + `}`,
			apierror.CodeMalformedJSON, "serviceArguments.kvModelProfile", "duplicate"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeJSON([]byte(tc.body))
			ae := wantAPIError(t, err, 400, tc.code, tc.field, "")
			if !strings.Contains(ae.Message, tc.msg) {
				t.Errorf("message %q lacks %q", ae.Message, tc.msg)
			}
		})
	}
}

// Every LoxiLB field infergate does not serve is a 400 unsupported naming
// the field and saying why — not unknown_field — unless it asks for nothing.
func TestDecodeLoxiLBUnsupported(t *testing.T) {
	const ep = `{"endpointIP":"10.1.0.1","targetPort":8000,"weight":1`
	tests := []struct {
		name, sa, ep, field, why string
	}{
		{"timeoutMemberConnect", `"timeoutMemberConnect":5000`, "", "serviceArguments.timeoutMemberConnect", "dial timeout"},
		{"timeoutMemberData", `"timeoutMemberData":1`, "", "serviceArguments.timeoutMemberData", "inactiveTimeOut"},
		{"timeoutTcpInspect", `"timeoutTcpInspect":1`, "", "serviceArguments.timeoutTcpInspect", "read-header"},
		{"vip_qos_policy_id", `"vip_qos_policy_id":"q"`, "", "serviceArguments.vip_qos_policy_id", "QoS"},
		{"kvModelProfile", `"kvModelProfile":"m"`, "", "serviceArguments.kvModelProfile", "profile"},
		{"kvExactApiMode chat", `"kvExactApiMode":"chat"`, "", "serviceArguments.kvExactApiMode", "completions and chat"},
		{"fc_mode enforce", `"fc_mode":"enforce"`, "", "serviceArguments.fc_mode", "capacity admission"},
		{"case-insensitive too", `"TIMEOUTTCPINSPECT":9`, "", "serviceArguments.timeoutTcpInspect", "header"},
		{"ep domainName", "", `,"domainName":"x"`, "endpoints[0].domainName", "Host"},
		{"ep monitorAddress", "", `,"monitorAddress":"10.9.9.9"`, "endpoints[0].monitorAddress", "address"},
		{"ep httpVersion 1.0", "", `,"httpVersion":"1.0"`, "endpoints[0].httpVersion", "HTTP/1.1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sa := `"externalIP":"10.0.0.1","port":80,"protocol":"tcp","mode":4`
			if tc.sa != "" {
				sa += "," + tc.sa
			}
			body := `{"serviceArguments":{` + sa + `},"endpoints":[` + ep + tc.ep + `}]}`
			_, err := DecodeJSON([]byte(body))
			ae := wantAPIError(t, err, 400, apierror.CodeUnsupported, tc.field, "")
			if !strings.Contains(ae.Message, tc.field) || !strings.Contains(ae.Message, tc.why) {
				t.Errorf("message %q should name %s and say %q", ae.Message, tc.field, tc.why)
			}
		})
	}
	neutral := `{"serviceArguments":{"externalIP":"10.0.0.1","port":80,"protocol":"tcp","mode":4,` +
		`"timeoutMemberConnect":0,"api_key_auth":"disabled","kvExactApiMode":"both","vip_qos_policy_id":"",` +
		`"alpn_protocols":null,"tls_versions":[],"mtls_frontend":{},"fc_effective":{"mode":"enforce"}},` +
		`"hw_bytes":10,"hw_pkts":1,"offload_state":"hw",` +
		`"endpoints":[` + ep + `,"httpVersion":"1.1","domainName":"","health":"down"}]}`
	if _, err := DecodeJSON([]byte(neutral)); err != nil {
		t.Errorf("neutral LoxiLB values must be accepted: %v", err)
	}
}

func TestLoxiLBValidation(t *testing.T) {
	base := func() Rule {
		r := plainRule()
		r.ServiceArguments.ProbeType = "http"
		return r
	}
	long := strings.Repeat("é", 257)
	many := map[string]string{}
	for i := 0; i < 33; i++ {
		many[strings.Repeat("k", i+1)] = "v"
	}
	tests := []struct {
		name  string
		mut   func(*Rule)
		code  string
		field string
	}{
		{"annotations over 32 keys", func(r *Rule) { r.ServiceArguments.Annotations = many }, apierror.CodeInvalidField, "serviceArguments.annotations"},
		{"annotation value over 256", func(r *Rule) { r.ServiceArguments.Annotations = map[string]string{"k": long} }, apierror.CodeInvalidField, "serviceArguments.annotations.k"},
		{"annotation empty key", func(r *Rule) { r.ServiceArguments.Annotations = map[string]string{"": "v"} }, apierror.CodeInvalidField, "serviceArguments.annotations."},
		{"secondary VIP not an IP", func(r *Rule) { r.SecondaryVIPs = []SecondaryVIP{{Address: "vip"}} }, apierror.CodeInvalidField, "secondaryVIPs[0].address"},
		{"secondary VIP missing", func(r *Rule) { r.SecondaryVIPs = []SecondaryVIP{{SubnetID: "s"}} }, apierror.CodeInvalidField, "secondaryVIPs[0].address"},
		{"secondary VIP = externalIP", func(r *Rule) { r.SecondaryVIPs = []SecondaryVIP{{Address: "10.0.0.10"}} }, apierror.CodeInvalidCombo, "secondaryVIPs[0].address"},
		{"secondary VIP twice", func(r *Rule) { r.SecondaryVIPs = []SecondaryVIP{{Address: "10.0.0.11"}, {Address: "10.0.0.11"}} }, apierror.CodeInvalidField, "secondaryVIPs[1].address"},
		{"secondary VIP unspecified", func(r *Rule) { r.SecondaryVIPs = []SecondaryVIP{{Address: "0.0.0.0"}} }, apierror.CodeInvalidField, "secondaryVIPs[0].address"},
		{"urlPath without http probe", func(r *Rule) { r.ServiceArguments.ProbeType = "tcp"; r.Endpoints[0].URLPath = "/h" }, apierror.CodeInvalidCombo, "endpoints[0].urlPath"},
		{"expectedCodes without probe", func(r *Rule) { r.ServiceArguments.ProbeType = ""; r.Endpoints[1].ExpectedCodes = "200" }, apierror.CodeInvalidCombo, "endpoints[1].expectedCodes"},
		{"bad urlPath", func(r *Rule) { r.Endpoints[0].URLPath = "health" }, apierror.CodeInvalidField, "endpoints[0].urlPath"},
		{"bad expectedCodes", func(r *Rule) { r.Endpoints[0].ExpectedCodes = "2xx" }, apierror.CodeInvalidField, "endpoints[0].expectedCodes"},
		{"reversed range", func(r *Rule) { r.Endpoints[0].ExpectedCodes = "204-200" }, apierror.CodeInvalidField, "endpoints[0].expectedCodes"},
		{"code out of range", func(r *Rule) { r.Endpoints[0].ExpectedCodes = "700" }, apierror.CodeInvalidField, "endpoints[0].expectedCodes"},
		{"POST probe", func(r *Rule) { r.Endpoints[0].HTTPMethod = "POST" }, apierror.CodeUnsupported, "endpoints[0].httpMethod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.mut(&r)
			wantAPIError(t, Validate(r), 400, tc.code, tc.field, "")
		})
	}
	r := base()
	r.ServiceArguments.Annotations = map[string]string{"k": strings.Repeat("é", 256)}
	r.SecondaryVIPs = []SecondaryVIP{{Address: "[::1]"}, {Address: "10.0.0.12"}}
	r.Endpoints[0].ExpectedCodes = "200, 202-204"
	r.Endpoints[0].HTTPMethod = "head"
	if err := Validate(r); err != nil {
		t.Errorf("limits themselves must be accepted: %v", err)
	}
}

func TestParseExpectedCodes(t *testing.T) {
	s, err := ParseExpectedCodes("200,202-204,301")
	if err != nil {
		t.Fatal(err)
	}
	for code, want := range map[int]bool{200: true, 201: false, 202: true, 204: true, 205: false, 301: true, 500: false} {
		if s.Accepts(code) != want {
			t.Errorf("Accepts(%d) = %v", code, !want)
		}
	}
}

// TestAPIKeyAuthValues: LoxiLB's api_key_auth compiles to the key policy.
func TestAPIKeyAuthValues(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want spec.KeyPolicy
		ok   bool
	}{
		{"", spec.KeysIfSSEMode, true},
		{"required", spec.KeysRequired, true},
		{"disabled", spec.KeysOff, true},
		{"yes", 0, false},
	} {
		r := Rule{ServiceArguments: ServiceArguments{ExternalIP: "127.0.0.1", Port: 80, Protocol: "tcp", Mode: 4, APIKeyAuth: tc.v},
			Endpoints: []Endpoint{{EndpointIP: "127.0.0.2", TargetPort: 8000, Weight: 1}}}
		c, err := Compile(r)
		if tc.ok != (err == nil) {
			t.Fatalf("api_key_auth %q: err %v", tc.v, err)
		}
		if err == nil && c.APIKeys != tc.want {
			t.Fatalf("api_key_auth %q compiled to %v, want %v", tc.v, c.APIKeys, tc.want)
		}
	}
}
