package datapath

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/spec"
)

func TestPDRouteFor(t *testing.T) {
	const (
		v, sg, trt = spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM
		post, get  = http.MethodPost, http.MethodGet
	)
	seq := pdRoute{kind: pdSequence}
	one := func(role spec.Role, reason string) pdRoute { return pdRoute{kind: pdOne, role: role, reason: reason} }
	tests := []struct {
		engine       spec.Engine
		method, path string
		want         pdRoute
	}{
		{v, post, "/v1/completions", seq},
		{v, post, "/v1/chat/completions", seq},
		{v, post, "/v1/responses", seq},
		{sg, post, "/v1/responses", seq},
		{trt, post, "/v1/chat/completions", seq},
		{trt, post, "/v1/responses", one(spec.RoleDecode, reasonNoTransfer)},
		{v, post, "/v1/messages", one(spec.RoleDecode, reasonNoTransfer)},
		{trt, post, "/v1/messages", one(spec.RoleDecode, reasonNoTransfer)},
		{sg, post, "/v1/messages", pdRoute{kind: pdOne, role: spec.RoleAny, reason: reasonNoTransfer, strict: true}},
		{v, get, "/v1/completions", one(spec.RolePrefill, reasonMethod)},
		{v, post, "/tokenize", one(spec.RolePrefill, reasonSidePath)},
		{sg, post, "/detokenize", one(spec.RolePrefill, reasonSidePath)},
		{v, post, "/v1/messages/count_tokens", one(spec.RolePrefill, reasonSidePath)},
		{v, post, "/v1/embeddings", one(spec.RolePrefill, reasonSidePath)},
		{trt, get, "/v1/models", one(spec.RolePrefill, reasonSidePath)},
		{trt, get, "/v1/models/m", one(spec.RolePrefill, reasonSidePath)},
		{v, get, "/health", one(spec.RolePrefill, reasonSidePath)},
		{v, get, "/version", one(spec.RolePrefill, reasonSidePath)},
		{v, post, "/v1/audio/transcriptions", pdRoute{kind: pdRefused}},
		{v, get, "/metrics", pdRoute{kind: pdRefused}},
		{v, get, "/v1/modelsx", pdRoute{kind: pdRefused}},
	}
	for _, tc := range tests {
		d, ok := pd.For(tc.engine)
		if !ok {
			t.Fatalf("no dialect for %s", tc.engine)
		}
		if got := pdRouteFor(d, tc.method, tc.path); got != tc.want {
			t.Errorf("pdRouteFor(%s, %s %s) = %+v, want %+v", tc.engine, tc.method, tc.path, got, tc.want)
		}
	}
}

func TestRoutableContentType(t *testing.T) {
	tests := []struct {
		ct   string
		want bool
	}{
		{"", true},
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"application/vnd.api+json", true},
		{"application/x-www-form-urlencoded", true}, // curl -d
		{"text/plain", true},
		{"multipart/form-data; boundary=x", false},
		{"application/octet-stream", false},
		{"audio/wav", false},
		{"not a type;;", false},
	}
	for _, tc := range tests {
		if got := routableContentType(tc.ct); got != tc.want {
			t.Errorf("routableContentType(%q) = %v, want %v", tc.ct, got, tc.want)
		}
	}
}

func TestPathAllowed(t *testing.T) {
	allow := []string{"/v1/completions", "/v1/models/*"}
	tests := []struct {
		allowed []string
		path    string
		want    bool
	}{
		{nil, "/anything", true},
		{allow, "/v1/completions", true},
		{allow, "/v1/completions/x", false},
		{allow, "/v1/models", true},
		{allow, "/v1/models/llama", true},
		{allow, "/v1/modelsx", false},
		{allow, "/v1/embeddings", false},
	}
	for _, tc := range tests {
		if got := pathAllowed(tc.allowed, tc.path); got != tc.want {
			t.Errorf("pathAllowed(%v, %q) = %v, want %v", tc.allowed, tc.path, got, tc.want)
		}
	}
}

func TestIsUpgrade(t *testing.T) {
	tests := []struct {
		conn, upgrade string
		want          bool
	}{
		{"Upgrade", "websocket", true},
		{"keep-alive, upgrade", "websocket", true},
		{"keep-alive", "websocket", false},
		{"Upgrade", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodGet, "/v1/realtime", strings.NewReader(""))
		if tc.conn != "" {
			r.Header.Set("Connection", tc.conn)
		}
		if tc.upgrade != "" {
			r.Header.Set("Upgrade", tc.upgrade)
		}
		if got := isUpgrade(r); got != tc.want {
			t.Errorf("isUpgrade(Connection %q, Upgrade %q) = %v, want %v", tc.conn, tc.upgrade, got, tc.want)
		}
	}
}
