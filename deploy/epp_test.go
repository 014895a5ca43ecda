package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/daemon"
	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
	"gopkg.in/yaml.v3"
)

const eppKubeDir = "kubernetes/epp"

// eppDocs decodes every document the EPP kustomization lists, by kind and
// name, and checks no manifest in the directory is left out.
func eppDocs(t *testing.T) map[string]map[string]any {
	t.Helper()
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(eppKubeDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	docs := map[string]map[string]any{}
	for _, r := range kust.Resources {
		listed[r] = true
		f, err := os.Open(filepath.Join(eppKubeDir, r))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(f)
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			kind, _ := doc["kind"].(string)
			if kind == "" || doc["apiVersion"] == nil {
				t.Fatalf("%s: a document without kind/apiVersion", r)
			}
			docs[kind] = doc
		}
		f.Close()
	}
	all, _ := filepath.Glob(filepath.Join(eppKubeDir, "*.yaml"))
	for _, f := range all {
		if base := filepath.Base(f); base != "kustomization.yaml" && !listed[base] {
			t.Errorf("%s is not listed in kustomization.yaml", base)
		}
	}
	return docs
}

// eppAt walks a decoded YAML tree: string keys index maps, ints index lists.
func eppAt(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// TestEPPManifests: the EPP manifests agree with each other and with the
// binary — the ConfigMap's rule loads, the container's command line parses
// into a serve with the EPP on and --epp-rule naming that rule, the probes
// and Service use the EPP's ports, and the InferencePool's endpoint picker
// is that Service on the ext_proc port. No cluster applies them here.
func TestEPPManifests(t *testing.T) {
	docs := eppDocs(t)
	for _, k := range []string{"Namespace", "ConfigMap", "Deployment", "Service", "InferencePool", "HTTPRoute"} {
		if docs[k] == nil {
			t.Fatalf("no %s in %s", k, eppKubeDir)
		}
	}

	pool, _ := eppAt(docs["ConfigMap"], "data", "pool.yaml").(string)
	path := filepath.Join(t.TempDir(), "pool.yaml")
	if err := os.WriteFile(path, []byte(pool), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := rules.LoadFiles(path)
	if err != nil || len(loaded) != 1 || !loaded[0].IsRule() {
		t.Fatalf("ConfigMap rule: %d documents, %v", len(loaded), err)
	}
	ruleName := loaded[0].Rule.ServiceArguments.Name

	c := eppAt(docs["Deployment"], "spec", "template", "spec", "containers", 0)
	var args []string
	for _, a := range eppAt(c, "args").([]any) {
		args = append(args, a.(string))
	}
	var got *daemon.Options
	var out, errb bytes.Buffer
	env := cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" },
		Serve: func(_ context.Context, o daemon.Options, _ *logrus.Logger) error { got = &o; return nil }}
	if code := cli.Main(context.Background(), args, env); code != cli.ExitOK || got == nil {
		t.Fatalf("infergate %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
	}
	if got.EPP.Addr != ":9002" || got.EPP.HealthAddr != ":9003" || got.EPPRule != ruleName {
		t.Errorf("serve options: epp-addr %q, epp-health-addr %q, epp-rule %q; want :9002, :9003, %q", got.EPP.Addr, got.EPP.HealthAddr, got.EPPRule, ruleName)
	}
	if err := got.EPP.Validate(); err != nil {
		t.Error(err)
	}
	ports := map[string]int{}
	for _, p := range eppAt(c, "ports").([]any) {
		ports[eppAt(p, "name").(string)] = eppAt(p, "containerPort").(int)
	}
	if ports["grpc-ext-proc"] != 9002 || ports["grpc-health"] != 9003 {
		t.Errorf("container ports %v", ports)
	}
	for _, probe := range []string{"readinessProbe", "livenessProbe"} {
		if eppAt(c, probe, "grpc", "port") != 9003 {
			t.Errorf("%s does not check gRPC health on 9003", probe)
		}
	}
	if eppAt(c, "readinessProbe", "grpc", "service") != "readiness" {
		t.Error("readinessProbe does not ask the readiness service")
	}

	svc := docs["Service"]
	ref := eppAt(docs["InferencePool"], "spec", "endpointPickerRef")
	if eppAt(ref, "name") != eppAt(svc, "metadata", "name") || eppAt(ref, "port", "number") != 9002 {
		t.Errorf("endpointPickerRef %v does not name Service %v on 9002", ref, eppAt(svc, "metadata", "name"))
	}
	if eppAt(svc, "spec", "ports", 0, "port") != 9002 || eppAt(svc, "spec", "ports", 0, "targetPort") != "grpc-ext-proc" {
		t.Errorf("Service ports %v", eppAt(svc, "spec", "ports"))
	}
	if sel := eppAt(svc, "spec", "selector", "app.kubernetes.io/name"); sel != eppAt(docs["Deployment"], "spec", "template", "metadata", "labels", "app.kubernetes.io/name") {
		t.Errorf("Service selector %v does not match the pod", sel)
	}
	if eppAt(docs["Deployment"], "spec", "template", "spec", "automountServiceAccountToken") != false {
		t.Error("the EPP needs no Kubernetes API access: automountServiceAccountToken must be false")
	}
}
