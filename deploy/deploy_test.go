package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/infergate/infergate/cli"
	"github.com/infergate/infergate/daemon"
	"github.com/infergate/infergate/rules"
	"github.com/sirupsen/logrus"
	"gopkg.in/yaml.v3"
)

// Recipe files, relative to this package.
const (
	kubeDir     = "kubernetes"
	dockerfile  = "../Dockerfile"
	systemdUnit = "../packaging/systemd/infergate.service"
)

// serveParses runs `infergate <args>` with a Serve that records the options
// instead of starting the daemon, and fails the test unless the command
// line parses into a serve call.
func serveParses(t *testing.T, args []string) daemon.Options {
	t.Helper()
	var got *daemon.Options
	var out, errb bytes.Buffer
	env := cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" },
		Serve: func(_ context.Context, o daemon.Options, _ *logrus.Logger) error {
			got = &o
			return nil
		}}
	if code := cli.Main(context.Background(), args, env); code != cli.ExitOK || got == nil {
		t.Fatalf("infergate %s: exit %d (serve called: %v)\n%s", strings.Join(args, " "), code, got != nil, errb.String())
	}
	return *got
}

// configMapRules loads the rule file a ConfigMap carries under key as the
// daemon's --rules would.
func configMapRules(t *testing.T, docs map[string]map[string]any, key string) ([]rules.Document, error) {
	t.Helper()
	data, _ := get(docs["ConfigMap"], "data", key).(string)
	path := filepath.Join(t.TempDir(), key)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return rules.LoadFiles(path)
}

// kustomizedDocs decodes every document of every resource dir's
// kustomization lists, by kind, and checks no manifest in dir is left out.
func kustomizedDocs(t *testing.T, dir string) map[string]map[string]any {
	t.Helper()
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &kust); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	byKind := map[string]map[string]any{}
	for _, r := range kust.Resources {
		listed[r] = true
		f, err := os.Open(filepath.Join(dir, r))
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
			byKind[kind] = doc
		}
		f.Close()
	}
	all, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range all {
		if base := filepath.Base(f); base != "kustomization.yaml" && !listed[base] {
			t.Errorf("%s is not listed in kustomization.yaml", base)
		}
	}
	return byKind
}

// get walks a decoded YAML tree: string keys index maps, ints index lists.
func get(v any, path ...any) any {
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

func TestKubernetesManifests(t *testing.T) {
	docs := kustomizedDocs(t, kubeDir)
	for _, kind := range []string{"Namespace", "ConfigMap", "PersistentVolumeClaim", "Deployment", "Service"} {
		if docs[kind] == nil {
			t.Fatalf("no %s in %s", kind, kubeDir)
		}
	}

	// The ConfigMap's rules load and validate as a POST would.
	rs, err := configMapRules(t, docs, "rules.yaml")
	if err != nil || len(rs) == 0 {
		t.Fatalf("ConfigMap rules.yaml: %d documents, %v", len(rs), err)
	}
	for _, d := range rs {
		if err := rules.Validate(d.Rule); err != nil {
			t.Errorf("%s: %v", d.Source, err)
		}
	}

	// The container's args parse, and point where the volumes are mounted.
	c := get(docs["Deployment"], "spec", "template", "spec", "containers", 0)
	var args []string
	for _, a := range get(c, "args").([]any) {
		args = append(args, a.(string))
	}
	o := serveParses(t, args)
	mounts := map[string]bool{}
	for _, m := range get(c, "volumeMounts").([]any) {
		mounts[get(m, "mountPath").(string)] = true
	}
	for what, dir := range map[string]string{"--state-dir": o.StateDir, "--rules": o.RulesPath,
		"--api-token-file": filepath.Dir(o.Auth.TokenFile)} {
		if !mounts[dir] {
			t.Errorf("%s %s is not a volume mount (%v)", what, dir, mounts)
		}
	}
	if !o.BindAnyVIP {
		t.Error("the Deployment must serve rule VIPs the pod does not own (--bind-any-vip)")
	}

	// Every rule port is a container port and a Service port.
	containerPorts := map[int]bool{}
	for _, p := range get(c, "ports").([]any) {
		containerPorts[get(p, "containerPort").(int)] = true
	}
	servicePorts := map[int]bool{}
	for _, p := range get(docs["Service"], "spec", "ports").([]any) {
		servicePorts[get(p, "port").(int)] = true
	}
	for _, d := range rs {
		p := d.Rule.ServiceArguments.Port
		if !containerPorts[p] || !servicePorts[p] {
			t.Errorf("rule port %d: container port %v, service port %v", p, containerPorts[p], servicePorts[p])
		}
	}
}

// TestDockerfileCommand: the image's default command parses, and the
// runtime stage installs only libzmq5 and ca-certificates.
func TestDockerfileCommand(t *testing.T) {
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	var entry, cmd []string
	var runtimeInstalls string
	stage := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "FROM "):
			stage++
		case strings.HasPrefix(line, "ENTRYPOINT "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "ENTRYPOINT ")), &entry); err != nil {
				t.Fatalf("ENTRYPOINT is not exec form: %v", err)
			}
		case strings.HasPrefix(line, "CMD "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "CMD ")), &cmd); err != nil {
				t.Fatalf("CMD is not exec form: %v", err)
			}
		case stage == 2 && strings.Contains(line, "apt-get install"):
			runtimeInstalls = line
		}
	}
	if len(entry) != 1 || filepath.Base(entry[0]) != "infergate" || len(cmd) == 0 || cmd[0] != "serve" {
		t.Fatalf("ENTRYPOINT %q CMD %q: want the binary and serve", entry, cmd)
	}
	serveParses(t, cmd)
	pkgs := regexp.MustCompile(`--no-install-recommends (.*?) \\`).FindStringSubmatch(runtimeInstalls)
	if pkgs == nil || pkgs[1] != "libzmq5 ca-certificates" {
		t.Fatalf("runtime stage installs %q, want libzmq5 ca-certificates", runtimeInstalls)
	}
}

// TestSystemdUnit: ExecStart parses, and the unit keeps its hardening.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(systemdUnit)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	var exec string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") || !strings.Contains(line, "=") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		set[k] = v
		if k == "ExecStart" {
			exec = v
		}
	}
	fields := strings.Fields(strings.ReplaceAll(exec, "${STATE_DIRECTORY}", "/var/lib/infergate"))
	if len(fields) < 2 || filepath.Base(fields[0]) != "infergate" {
		t.Fatalf("ExecStart %q", exec)
	}
	if o := serveParses(t, fields[1:]); o.StateDir != "/var/lib/infergate" {
		t.Errorf("state dir %q, want the StateDirectory", o.StateDir)
	}
	for k, want := range map[string]string{"DynamicUser": "yes", "ProtectSystem": "strict", "StateDirectory": "infergate",
		"NoNewPrivileges": "yes", "CapabilityBoundingSet": "CAP_NET_BIND_SERVICE", "PrivateTmp": "yes", "ProtectHome": "yes"} {
		if set[k] != want {
			t.Errorf("%s=%q, want %q", k, set[k], want)
		}
	}
}
