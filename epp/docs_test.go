package epp

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
)

// The Envoy config in docs/epp.md must at least be a valid Envoy bootstrap
// (every field and @type known to Envoy's published protos, every validation
// rule met) and ask for the processing modes this package needs. No Envoy
// runs here; this is the part of the snippet that can be checked without one.
func TestDocsEnvoyConfig(t *testing.T) {
	doc, err := os.ReadFile("../docs/epp.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\nstatic_resources:")
	if !ok {
		t.Fatal("docs/epp.md has no Envoy static_resources block")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("unterminated yaml block")
	}
	var tree any
	if err := yaml.Unmarshal([]byte("static_resources:"+block), &tree); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("Envoy would reject it: %v", err)
	}

	var hcm hcmv3.HttpConnectionManager
	if err := bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	// A client's own copy of the destination header must be gone before
	// ext_proc: when the EPP gives no pick (fail-open) it would otherwise
	// match the picked route and steer the ORIGINAL_DST cluster to any
	// address the client names.
	var ep extprocfilterv3.ExternalProcessor
	stripped := false
	for _, f := range hcm.GetHttpFilters() {
		if f.GetTypedConfig().MessageIs(&ep) {
			if err := f.GetTypedConfig().UnmarshalTo(&ep); err != nil {
				t.Fatal(err)
			}
			break
		}
		var hm headermutationv3.HeaderMutation
		if f.GetTypedConfig().MessageIs(&hm) {
			if err := f.GetTypedConfig().UnmarshalTo(&hm); err != nil {
				t.Fatal(err)
			}
			for _, m := range hm.GetMutations().GetRequestMutations() {
				stripped = stripped || m.GetRemove() == HeaderDestination
			}
		}
	}
	if ep.GetGrpcService() == nil {
		t.Fatal("no ext_proc filter")
	}
	if !stripped {
		t.Errorf("no filter before ext_proc removes a client's own %s", HeaderDestination)
	}
	for name, v := range map[string]interface{ ValidateAll() error }{"http_connection_manager": &hcm, "ext_proc": &ep} {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: Envoy would reject it: %v", name, err)
		}
	}
	pm := ep.GetProcessingMode()
	if pm.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED || pm.GetRequestTrailerMode() != extprocfilterv3.ProcessingMode_SEND {
		t.Errorf("processing mode %v: the EPP needs FULL_DUPLEX_STREAMED request bodies with trailers SEND", pm)
	}
	found := false
	for _, c := range bs.GetStaticResources().GetClusters() {
		if cfg := c.GetOriginalDstLbConfig(); cfg != nil {
			found = cfg.GetUseHttpHeader() && cfg.GetHttpHeaderName() == HeaderDestination
		}
	}
	if !found {
		t.Errorf("no ORIGINAL_DST cluster routing on %s", HeaderDestination)
	}
}
