package optconf

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type testLimits struct {
	Timeout time.Duration `yaml:"timeout"`
	Hosts   []string      `yaml:"host"`
}

type testOpts struct {
	Name   string     `yaml:"name"`
	Count  int        `yaml:"count"`
	On     bool       `yaml:"on"`
	Hidden int        `yaml:"-"`
	Limits testLimits `yaml:",inline"`
	APIKey string     `yaml:"api-key" optconf:"secret"`
}

func testDefaults() testOpts {
	return testOpts{Name: "def", Count: 1, Limits: testLimits{Timeout: time.Second, Hosts: []string{"a"}}}
}

// testFlags binds flags the way cli/serve.go does: into the fields, with
// the defaults as the flag defaults.
func testFlags(o *testOpts) *pflag.FlagSet {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.StringVar(&o.Name, "name", o.Name, "the name")
	fs.IntVar(&o.Count, "count", o.Count, "how many")
	fs.BoolVar(&o.On, "on", o.On, "switch")
	fs.DurationVar(&o.Limits.Timeout, "timeout", o.Limits.Timeout, "a bound")
	fs.StringSliceVar(&o.Limits.Hosts, "host", o.Limits.Hosts, "hosts")
	fs.StringVar(&o.APIKey, "api-key", o.APIKey, "a key")
	return fs
}

func load(t *testing.T, args []string, env map[string]string, file string) (testOpts, error) {
	t.Helper()
	o := testDefaults()
	fs := testFlags(&o)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	src := Sources{FileName: "test.yaml", EnvPrefix: "T_", Getenv: func(k string) string { return env[k] }}
	if file != "" {
		src.File = []byte(file)
	}
	err := Apply(fs, &o, src)
	return o, err
}

func TestPrecedence(t *testing.T) {
	const file = "name: file\ncount: 3\non: true\ntimeout: 30s\nhost: [f1, f2]\n"
	env := map[string]string{"T_NAME": "env", "T_COUNT": "4", "T_ON": "false", "T_TIMEOUT": "1m", "T_HOST": "e1,e2"}
	flags := []string{"--name=flag", "--count=5", "--on=true", "--timeout=2m", "--host=g1"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want testOpts
	}{
		{"defaults", nil, nil, "", testDefaults()},
		{"file over default", nil, nil, file, testOpts{Name: "file", Count: 3, On: true, Limits: testLimits{30 * time.Second, []string{"f1", "f2"}}}},
		{"env over file", nil, env, file, testOpts{Name: "env", Count: 4, On: false, Limits: testLimits{time.Minute, []string{"e1", "e2"}}}},
		{"flag over env and file", flags, env, file, testOpts{Name: "flag", Count: 5, On: true, Limits: testLimits{2 * time.Minute, []string{"g1"}}}},
		{"flag set to its default still wins", []string{"--count=1"}, nil, file, testOpts{Name: "file", Count: 1, On: true, Limits: testLimits{30 * time.Second, []string{"f1", "f2"}}}},
		{"mixed", []string{"--name=flag"}, map[string]string{"T_TIMEOUT": "5s"}, "count: 9\n", testOpts{Name: "flag", Count: 9, Limits: testLimits{5 * time.Second, []string{"a"}}}},
		{"empty env is unset", nil, map[string]string{"T_NAME": ""}, "name: file\n", testOpts{Name: "file", Count: 1, Limits: testLimits{time.Second, []string{"a"}}}},
		{"key without value keeps default", nil, nil, "count:\nname: x\n", testOpts{Name: "x", Count: 1, Limits: testLimits{time.Second, []string{"a"}}}},
		{"empty file", nil, nil, "# nothing\n", testDefaults()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := load(t, tt.args, tt.env, tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want []string // substrings of the error
	}{
		{"unknown key", nil, nil, "name: x\ncoutn: 3\n", []string{`test.yaml:2: unknown key "coutn"`, `did you mean "count"`}},
		{"unknown key, nothing close", nil, nil, "zzzzzzzzzzzz: 1\n", []string{`unknown key "zzzzzzzzzzzz"`}},
		{"unknown key even under a flag", []string{"--count=2"}, nil, "nmae: x\n", []string{`unknown key "nmae"`, `did you mean "name"`}},
		{"bad int", nil, nil, "count: many\n", []string{`key "count": want an integer, got "many"`}},
		{"bad duration", nil, nil, "timeout: 30\n", []string{`key "timeout": want a duration such as 30s`}},
		{"bad bool", nil, nil, "on: sometimes\n", []string{`key "on": want a boolean`}},
		{"bad list", nil, nil, "host: {a: b}\n", []string{`key "host": want a list of strings, got a mapping`}},
		{"bad type checked under a flag", []string{"--count=2"}, nil, "count: many\n", []string{`key "count"`}},
		{"duplicate key", nil, nil, "count: 1\ncount: 2\n", []string{`key "count" given twice`}},
		{"not a mapping", nil, nil, "- a\n", []string{"want a mapping"}},
		{"bad env", nil, map[string]string{"T_TIMEOUT": "soon"}, "", []string{`T_TIMEOUT="soon": want a duration`}},
		{"bad env int", nil, map[string]string{"T_COUNT": "x"}, "", []string{`T_COUNT="x": want an integer`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.args, tt.env, tt.file)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestRenderRedactsAndParsesBack(t *testing.T) {
	o := testDefaults()
	o.Name, o.Count, o.Limits.Timeout, o.APIKey = "nm", 7, 90*time.Second, "sk-very-secret"
	out, err := Render(&o, RenderOptions{Flags: testFlags(&testOpts{}), Unset: map[string]string{"on": "derived"}})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, w := range []string{"# the name\nname: nm\n", "timeout: 1m30s\n", "api-key: " + Redacted, "on: # derived\n"} {
		if !strings.Contains(s, w) {
			t.Errorf("render lacks %q:\n%s", w, s)
		}
	}
	if strings.Contains(s, "sk-very-secret") || strings.Contains(s, "Hidden") || strings.Contains(s, "hidden") {
		t.Errorf("render shows a secret or a yaml:\"-\" field:\n%s", s)
	}
	// Parsed back, every rendered value is the one rendered (the redacted
	// secret reads back as the placeholder, never the secret).
	back := testDefaults()
	if err := Apply(testFlags(&back), &back, Sources{File: out}); err != nil {
		t.Fatalf("render does not parse back: %v\n%s", err, s)
	}
	want := o
	want.APIKey = Redacted
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("parsed back %+v\nwant %+v", back, want)
	}
	// An empty secret shows as empty, so "not set" stays visible.
	o.APIKey = ""
	out, _ = Render(&o, RenderOptions{})
	if !strings.Contains(string(out), "api-key: \"\"\n") {
		t.Errorf("empty secret rendered as:\n%s", out)
	}
}

func TestFields(t *testing.T) {
	var o testOpts
	fs, err := Fields(&o)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	if want := []string{"name", "count", "on", "timeout", "host", "api-key"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("fields %v, want %v", names, want)
	}
	type dup struct {
		A int `yaml:"x"`
		B struct {
			C int `yaml:"x"`
		} `yaml:",inline"`
	}
	if _, err := Fields(&dup{}); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("duplicate name: err %v", err)
	}
	if _, err := Fields(o); err == nil {
		t.Fatal("non-pointer accepted")
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("INFERGATE_", "max-client-conns"); got != "INFERGATE_MAX_CLIENT_CONNS" {
		t.Fatal(got)
	}
}
