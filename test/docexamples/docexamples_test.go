package docexamples

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/testtool"
)

const (
	marker         = "<!-- example: loopback"
	notRunMarker   = "<!-- example: none; needs:"
	exampleTimeout = 90 * time.Second
	buildTimeout   = 5 * time.Minute
)

// example is one runnable block of a document, or several blocks of one
// session run in a single namespace.
type example struct {
	file    string // relative to the repository root
	line    int    // of the opening fence (of the session's first block)
	session string // blocks of one file with the same session run together
	script  string
	expect  []string
}

func (e example) name() string {
	return strings.ReplaceAll(e.file, "/", "_") + ":" + itoa(e.line)
}

func itoa(n int) string { return strconv.Itoa(n) }

// parseExamples returns the marked blocks of one Markdown document.
func parseExamples(file, text string) ([]example, error) {
	var out []example
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, marker) {
			continue
		}
		ex := example{file: file}
		body := strings.TrimSuffix(strings.TrimPrefix(l, "<!--"), "-->")
		for _, part := range strings.Split(body, ";") {
			part = strings.TrimSpace(part)
			if v, ok := strings.CutPrefix(part, "expect:"); ok {
				ex.expect = append(ex.expect, strings.TrimSpace(v))
			}
			if v, ok := strings.CutPrefix(part, "session:"); ok {
				ex.session = strings.TrimSpace(v)
			}
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
			return nil, &parseError{file, i + 1, "the example marker must sit right above a ```sh fence"}
		}
		ex.line = i + 2
		var b strings.Builder
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			b.WriteString(lines[j] + "\n")
		}
		if j == len(lines) {
			return nil, &parseError{file, ex.line, "unterminated fence"}
		}
		ex.script = b.String()
		out = append(out, ex)
		i = j
	}
	return out, nil
}

// joinSessions merges the blocks of one file that name the same session
// into one example at the place of its first block: a document can start a
// daemon in one block and use it in the next ones, as a reader following it
// in one shell would. An echo between the blocks names each one in the
// output, so a failure points at its block.
func joinSessions(exs []example) []example {
	var out []example
	first := map[string]int{} // file + session → index in out
	for _, ex := range exs {
		ex.script = "echo '### " + ex.file + ":" + itoa(ex.line) + "'\n" + ex.script
		if ex.session == "" {
			out = append(out, ex)
			continue
		}
		k := ex.file + "\x00" + ex.session
		i, ok := first[k]
		if !ok {
			first[k] = len(out)
			out = append(out, ex)
			continue
		}
		out[i].script += ex.script
		out[i].expect = append(out[i].expect, ex.expect...)
	}
	return out
}

// unclassified returns the lines of the ```sh fences of a document that
// carry neither an example marker nor a "none; needs: WHY" marker: every
// shell block a reader may paste either runs here or says what it needs.
func unclassified(text string) []int {
	var out []int
	lines := strings.Split(text, "\n")
	inFence := false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if !strings.HasPrefix(t, "```") {
			continue
		}
		if inFence {
			inFence = false
			continue
		}
		inFence = true
		if t != "```sh" {
			continue
		}
		prev := ""
		if i > 0 {
			prev = strings.TrimSpace(lines[i-1])
		}
		if !strings.HasPrefix(prev, marker) && !strings.HasPrefix(prev, notRunMarker) {
			out = append(out, i+1)
		}
	}
	return out
}

func TestUnclassified(t *testing.T) {
	doc := "<!-- example: loopback -->\n```sh\na\n```\n" +
		"<!-- example: none; needs: a GPU -->\n```sh\nb\n```\n" +
		"```sh\nc\n```\n```yaml\nd: 1\n```\n"
	if got := unclassified(doc); len(got) != 1 || got[0] != 9 {
		t.Fatalf("unclassified = %v, want [9]", got)
	}
}

// TestEveryShellBlockClassified: the documents have no shell block that is
// neither run nor explained.
func TestEveryShellBlockClassified(t *testing.T) {
	root := repoRoot(t)
	for _, f := range docFiles(t, root) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range unclassified(string(b)) {
			rel, _ := filepath.Rel(root, f)
			t.Errorf("%s:%d: a ```sh block without <!-- example: loopback; … --> (run it) or %s WHY --> (say what it needs)",
				rel, line, notRunMarker)
		}
	}
}

type parseError struct {
	file string
	line int
	msg  string
}

func (e *parseError) Error() string { return e.file + ":" + itoa(e.line) + ": " + e.msg }

func TestJoinSessions(t *testing.T) {
	doc := "<!-- example: loopback; session: s; expect: a -->\n```sh\necho a\n```\n" +
		"<!-- example: loopback; expect: b -->\n```sh\necho b\n```\n" +
		"<!-- example: loopback; session: s; expect: c -->\n```sh\necho c\n```\n"
	exs, err := parseExamples("d.md", doc)
	if err != nil {
		t.Fatal(err)
	}
	got := joinSessions(exs)
	if len(got) != 2 {
		t.Fatalf("joined into %d examples, want 2: %+v", len(got), got)
	}
	s := got[0]
	if s.line != 2 || s.script != "echo '### d.md:2'\necho a\necho '### d.md:10'\necho c\n" || strings.Join(s.expect, "|") != "a|c" {
		t.Errorf("session example %+v", s)
	}
	if b := got[1]; b.line != 6 || b.script != "echo '### d.md:6'\necho b\n" || strings.Join(b.expect, "|") != "b" {
		t.Errorf("lone example %+v", b)
	}
}

func TestParseExamples(t *testing.T) {
	doc := "intro\n<!-- example: loopback; expect: ok; expect: \"a\":1 -->\n```sh\necho ok\necho '{\"a\":1}'\n```\n```sh\nnot marked\n```\n"
	got, err := parseExamples("d.md", doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].line != 3 || got[0].script != "echo ok\necho '{\"a\":1}'\n" ||
		strings.Join(got[0].expect, "|") != `ok|"a":1` {
		t.Fatalf("parsed %+v", got)
	}
	for _, bad := range []string{"<!-- example: loopback -->\ntext\n", "<!-- example: loopback -->\n```sh\necho\n"} {
		if _, err := parseExamples("d.md", bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	return root
}

// docFiles are README.md, docs/*.md and the deployment recipes' READMEs.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	for _, pat := range []string{"docs/*.md", "deploy/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// allExamples collects the examples of the documents docFiles lists.
func allExamples(t *testing.T, root string) []example {
	t.Helper()
	var out []example
	for _, f := range docFiles(t, root) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		exs, err := parseExamples(rel, string(b))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, joinSessions(exs)...)
	}
	return out
}

// prelude makes the namespace the example runs in (see the package doc).
const prelude = `set -euo pipefail
ip link set lo up
# The docs' placeholder addresses (10.0.0.5, an etcd on 10.0.0.11, …) are
# local too, as every 127.0.0.0/8 address is.
ip route add local 10.0.0.0/8 dev lo
# Stage the binary and configs/ first: the build and the checkout may live
# under /tmp or /var/lib, which the next mounts hide.
mount -t tmpfs tmpfs /mnt
mkdir -p /mnt/.docbin /mnt/.etc/upper /mnt/.etc/work
cp "$DOCBIN" /mnt/.docbin/infergate
cp "$DOCSINK" /mnt/.docbin/otlp-sink
cp -r "$DOCREPO/configs" /mnt/.docconfigs
# /etc stays the machine's for reading; what an example writes there
# (/etc/infergate/tokens, /etc/loxilb/) lands on the tmpfs.
mount -t overlay overlay -o lowerdir=/etc,upperdir=/mnt/.etc/upper,workdir=/mnt/.etc/work /etc
mount -t tmpfs tmpfs /var/lib
mount -t tmpfs tmpfs /tmp
export HOME=/tmp/home PATH=/mnt/.docbin:$PATH
mkdir -p "$HOME/bin" && cd "$HOME"
ln -s /mnt/.docbin/infergate bin/infergate
ln -s /mnt/.docbin/otlp-sink bin/otlp-sink
ln -s /mnt/.docconfigs configs
`

// TestDocExamples runs every marked example.
func TestDocExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs daemons")
	}
	for _, tool := range []struct{ program, pkg string }{
		{"unshare", "util-linux"}, {"ip", "iproute2"}, {"curl", "curl"}, {"openssl", "openssl"}, {"jq", "jq"}, {"bash", "bash"},
		{"etcd", "etcd-server"},
	} {
		testtool.Require(t, tool.program, tool.pkg)
	}
	if err := exec.Command("unshare", "--user", "--map-root-user", "--net", "--mount", "--pid", "--fork", "true").Run(); err != nil {
		testtool.Missing(t, "namespaces unavailable: %v", err)
	}
	root := repoRoot(t)
	exs := allExamples(t, root)
	if len(exs) == 0 {
		t.Fatal("no marked examples in README.md and docs/*.md")
	}
	dir := t.TempDir()
	bin, sink := filepath.Join(dir, "infergate"), filepath.Join(dir, "otlp-sink")
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/infergate", "./test/docexamples/otlpsink")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := os.Rename(filepath.Join(dir, "otlpsink"), sink); err != nil {
		t.Fatal(err)
	}
	for _, ex := range exs {
		t.Run(ex.name(), func(t *testing.T) {
			// Each example has its own namespaces and mostly waits on its
			// daemons: running them side by side (up to -parallel) shortens
			// the suite without changing what one sees.
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), exampleTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, "unshare", "--user", "--map-root-user", "--net", "--mount", "--pid", "--fork",
				"--kill-child", "--mount-proc", "bash", "-c", prelude+ex.script)
			cmd.Env = append(os.Environ(), "DOCBIN="+bin, "DOCSINK="+sink, "DOCREPO="+root)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s:%d failed: %v\n%s", ex.file, ex.line, err, tail(out))
			}
			for _, want := range ex.expect {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s:%d: output lacks %q:\n%s", ex.file, ex.line, want, tail(out))
				}
			}
		})
	}
}

// tail is the end of a long output.
func tail(b []byte) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return strings.Join(lines, "\n")
}
