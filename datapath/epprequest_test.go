package datapath

import (
	"context"
	"fmt"
	"net/http"
	"net/textproto"
	"reflect"
	"testing"

	"github.com/infergate/infergate/epp"
)

// eppRequestHeaders are what Envoy sends on a GIE stream (lower-case names,
// pseudo-headers included), as eppload's driver sends them.
func eppRequestHeaders() epp.Headers {
	return epp.Headers{
		":method": {"POST"}, ":path": {"/v1/chat/completions?x=1"}, ":authority": {"gw.example"}, ":scheme": {"http"},
		"content-type": {"application/json"}, "content-length": {"8192"}, "user-agent": {"eppload"},
		"x-request-id": {"1f"}, "x-forwarded-for": {"10.1.2.3, 10.9.9.9"},
		"x-gateway-inference-objective": {"standard"},
	}
}

// TestEPPHTTPRequest: the request the selection reads carries the proxy's
// facts — canonical header names (the same on a remembered name as on a
// new one, and past the table's bound), pseudo-headers dropped, method,
// path and query, host and the client address.
func TestEPPHTTPRequest(t *testing.T) {
	tests := []struct {
		name       string
		headers    epp.Headers
		body       []byte
		method     string
		path, host string
		remote     string
	}{
		{"gie stream", eppRequestHeaders(), nil, "POST", "/v1/chat/completions", "gw.example", "10.1.2.3:0"},
		{"external address wins", epp.Headers{":path": {"/v1/completions"}, "x-envoy-external-address": {"192.0.2.7"},
			"x-forwarded-for": {"10.1.2.3"}}, []byte("{}"), "POST", "/v1/completions", "", "192.0.2.7:0"},
		{"no method, no body", epp.Headers{":path": {"/health"}, "x-envoy-external-address": {"2001:db8::1"}},
			nil, "GET", "/health", "", "[2001:db8::1]:0"},
		{"bad path", epp.Headers{":path": {"no-slash"}, ":method": {"PUT"}}, nil, "PUT", "/", "", ":0"},
	}
	var names eppHeaderNames
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := http.Header{}
			for k, v := range tc.headers {
				if k[0] != ':' {
					want[textproto.CanonicalMIMEHeaderKey(k)] = v
				}
			}
			ctx := context.WithValue(context.Background(), eppRequestKey{}, tc.name)
			for round := range 2 { // the second round reads remembered names
				r := eppHTTPRequest(ctx, &epp.Request{Headers: tc.headers, Body: tc.body}, &names)
				if !reflect.DeepEqual(r.Header, want) {
					t.Errorf("round %d: header %v, want %v", round, r.Header, want)
				}
				if r.Method != tc.method || r.URL.Path != tc.path || r.Host != tc.host || r.RemoteAddr != tc.remote {
					t.Errorf("round %d: %s %s host %q from %q, want %s %s host %q from %q", round,
						r.Method, r.URL.Path, r.Host, r.RemoteAddr, tc.method, tc.path, tc.host, tc.remote)
				}
				if r.Context().Value(eppRequestKey{}) != tc.name {
					t.Errorf("round %d: the request is not bound to the stream's context", round)
				}
			}
		})
	}
	// Past the bound names are still canonical, and the table stops growing.
	for i := range eppHeaderNamesMax + 10 {
		k := fmt.Sprintf("x-made-up-%d", i)
		if got, want := names.canonical(k), textproto.CanonicalMIMEHeaderKey(k); got != want {
			t.Fatalf("canonical(%q) = %q, want %q", k, got, want)
		}
	}
	if n := len(*names.m.Load()); n != eppHeaderNamesMax {
		t.Errorf("table holds %d names, want the bound %d", n, eppHeaderNamesMax)
	}
}

type eppRequestKey struct{}

// BenchmarkEPPHTTPRequest: rebuilding the request facts of one GIE stream
// (eppload's ten headers).
func BenchmarkEPPHTTPRequest(b *testing.B) {
	req := &epp.Request{Headers: eppRequestHeaders()}
	var names eppHeaderNames
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = eppHTTPRequest(ctx, req, &names)
	}
}
