package configs_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
)

// expectPrefix starts the first line of every file in invalid/.
const expectPrefix = "# expect:"

// validFiles are the examples the docs promise; a missing one fails.
var validFiles = []string{
	"multi.yaml",
	"single-pool-kv-exact.yaml",
	"single-pool-rr.yaml",
	"single-pool-allowed-paths.yaml",
	"sglang-pd.yaml",
	"trtllm-pd.yaml",
	"vllm-pd-1p1d.yaml",
	"vllm-pd-2p2d-cache-aware-kv.yaml",
}

func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	sort.Strings(out)
	return out
}

// TestValidExamples loads every example, then validates and compiles each
// rule: what LoadFiles accepts, a POST must accept too.
func TestValidExamples(t *testing.T) {
	files := yamlFiles(t, ".")
	have := map[string]bool{}
	for _, f := range files {
		have[f] = true
	}
	for _, want := range validFiles {
		if !have[want] {
			t.Errorf("example %s is missing", want)
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			docs, err := rules.LoadFiles(f)
			if err != nil {
				t.Fatalf("LoadFiles: %v", err)
			}
			if len(docs) == 0 {
				t.Fatal("no rules in file")
			}
			for _, d := range docs {
				if !strings.HasPrefix(d.Source, f+"#") {
					t.Errorf("source %q does not name %s", d.Source, f)
				}
				if _, err := rules.Compile(d.Rule); err != nil {
					t.Errorf("%s: Compile: %v", d.Source, err)
				}
			}
		})
	}
}

// TestMultiDocument pins multi.yaml's shape: three rules, two sharing
// VIP:port with different models, and loxicmd spellings translated.
func TestMultiDocument(t *testing.T) {
	docs, err := rules.LoadFiles("multi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 3 {
		t.Fatalf("got %d rules, want 3", len(docs))
	}
	k0, err := rules.KeyOf(docs[0].Rule)
	if err != nil {
		t.Fatal(err)
	}
	k1, err := rules.KeyOf(docs[1].Rule)
	if err != nil {
		t.Fatal(err)
	}
	if k0.ListenAddr() != k1.ListenAddr() || k0 == k1 {
		t.Errorf("first two rules must share VIP:port with different keys: %v, %v", k0, k1)
	}
	sa := docs[2].Rule.ServiceArguments
	if sa.Host != "chat.example.internal" || sa.Name != "multi-chat" {
		t.Errorf("loxicmd document: host %q name %q", sa.Host, sa.Name)
	}
	if got := docs[2].Source; got != "multi.yaml#3" {
		t.Errorf("source = %q, want multi.yaml#3", got)
	}
}

// expectation is a parsed "# expect: <status> <error_code> [<field>]" line.
type expectation struct {
	status int
	code   string
	field  string
}

func readExpectation(t *testing.T, path string) expectation {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), expectPrefix) {
		t.Fatalf("first line must be %q <status> <error_code> [<field>]", expectPrefix)
	}
	f := strings.Fields(strings.TrimPrefix(sc.Text(), expectPrefix))
	if len(f) < 2 || len(f) > 3 {
		t.Fatalf("bad expect line %q", sc.Text())
	}
	st, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatalf("bad status in %q", sc.Text())
	}
	e := expectation{status: st, code: f[1]}
	if len(f) == 3 {
		e.field = f[2]
	}
	return e
}

// firstError runs a file through the same path as `apply -f` followed by
// the server's POST handling: load (envelope + strict decode), then
// validate and compile every rule. The first error wins.
func firstError(path string) error {
	docs, err := rules.LoadFiles(path)
	if err != nil {
		return err
	}
	for _, d := range docs {
		if _, err := rules.Compile(d.Rule); err != nil {
			return fmt.Errorf("%s: %w", d.Source, err)
		}
	}
	return nil
}

// TestInvalidExamples: each file shows one common mistake and must fail
// with exactly the status, error_code and field its first line names.
func TestInvalidExamples(t *testing.T) {
	files := yamlFiles(t, "invalid")
	if len(files) < 12 {
		t.Fatalf("only %d invalid examples, want at least 12", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			want := readExpectation(t, f)
			err := firstError(f)
			if err == nil {
				t.Fatalf("loaded and compiled cleanly; want %d %s %s", want.status, want.code, want.field)
			}
			ae, ok := apierror.As(err)
			if !ok {
				t.Fatalf("error is not an *apierror.Error: %v", err)
			}
			got := expectation{status: ae.Status, code: ae.Code, field: ae.Field}
			if got != want {
				t.Fatalf("got %d %s %s, want %d %s %s\n  error: %v", got.status, got.code, got.field,
					want.status, want.code, want.field, err)
			}
			if !strings.Contains(err.Error(), f+"#") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}
