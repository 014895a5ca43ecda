package deploy_test

import (
	"testing"
)

const eppKubeDir = "kubernetes/epp"

// TestEPPManifests: the EPP manifests agree with each other and with the
// binary — the ConfigMap's rule loads, the container's command line parses
// into a serve with the EPP on and --epp-rule naming that rule, the probes
// and Service use the EPP's ports, and the InferencePool's endpoint picker
// is that Service on the ext_proc port. No cluster applies them here.
func TestEPPManifests(t *testing.T) {
	docs := kustomizedDocs(t, eppKubeDir)
	for _, k := range []string{"Namespace", "ConfigMap", "Deployment", "Service", "InferencePool", "HTTPRoute"} {
		if docs[k] == nil {
			t.Fatalf("no %s in %s", k, eppKubeDir)
		}
	}

	loaded, err := configMapRules(t, docs, "pool.yaml")
	if err != nil || len(loaded) != 1 || !loaded[0].IsRule() {
		t.Fatalf("ConfigMap rule: %d documents, %v", len(loaded), err)
	}
	ruleName := loaded[0].Rule.ServiceArguments.Name

	c := get(docs["Deployment"], "spec", "template", "spec", "containers", 0)
	var args []string
	for _, a := range get(c, "args").([]any) {
		args = append(args, a.(string))
	}
	got := serveParses(t, args)
	if got.EPP.Addr != ":9002" || got.EPP.HealthAddr != ":9003" || got.EPPRule != ruleName {
		t.Errorf("serve options: epp-addr %q, epp-health-addr %q, epp-rule %q; want :9002, :9003, %q", got.EPP.Addr, got.EPP.HealthAddr, got.EPPRule, ruleName)
	}
	if err := got.EPP.Validate(); err != nil {
		t.Error(err)
	}
	ports := map[string]int{}
	for _, p := range get(c, "ports").([]any) {
		ports[get(p, "name").(string)] = get(p, "containerPort").(int)
	}
	if ports["grpc-ext-proc"] != 9002 || ports["grpc-health"] != 9003 {
		t.Errorf("container ports %v", ports)
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if get(c, probe, "grpc", "port") != 9003 {
			t.Errorf("%s does not check gRPC health on 9003", probe)
		}
	}
	if get(c, "readinessProbe", "grpc", "service") != "readiness" {
		t.Error("readinessProbe does not ask the readiness service")
	}

	svc := docs["Service"]
	ref := get(docs["InferencePool"], "spec", "endpointPickerRef")
	if get(ref, "name") != get(svc, "metadata", "name") || get(ref, "port", "number") != 9002 {
		t.Errorf("endpointPickerRef %v does not name Service %v on 9002", ref, get(svc, "metadata", "name"))
	}
	if get(svc, "spec", "ports", 0, "port") != 9002 || get(svc, "spec", "ports", 0, "targetPort") != "grpc-ext-proc" {
		t.Errorf("Service ports %v", get(svc, "spec", "ports"))
	}
	if sel := get(svc, "spec", "selector", "app.kubernetes.io/name"); sel != get(docs["Deployment"], "spec", "template", "metadata", "labels", "app.kubernetes.io/name") {
		t.Errorf("Service selector %v does not match the pod", sel)
	}
	if get(docs["Deployment"], "spec", "template", "spec", "automountServiceAccountToken") != false {
		t.Error("the EPP needs no Kubernetes API access: automountServiceAccountToken must be false")
	}
}
