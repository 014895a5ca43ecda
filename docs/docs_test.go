// Package docs holds the operator documentation (Markdown). Its test keeps
// the documents true in ways a reader would trip over: they speak of the
// product, never of the tracker or of a branch, and every relative link
// and anchor they use resolves.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// documents are every Markdown file an operator reads.
func documents(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"*.md", "../*.md", "../configs/*.md", "../deploy/*/*.md"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	if len(out) < 5 {
		t.Fatalf("found only %v", out)
	}
	return out
}

var (
	trackerWords = regexp.MustCompile(`(?i)\bissue #?\d+|\bthis branch\b`)
	mdLink       = regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)
	heading      = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
)

// TestNoTrackerTalk: documents describe the product as it is; a tracker
// number or "this branch" means nothing to an operator.
func TestNoTrackerTalk(t *testing.T) {
	for _, f := range documents(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := trackerWords.FindString(line); m != "" {
				t.Errorf("%s:%d speaks of %q", f, i+1, m)
			}
		}
	}
}

// anchor is GitHub's anchor of a heading: lower case, punctuation dropped,
// spaces to hyphens.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinksResolve: every relative link names a file that exists and, with
// a #fragment into a Markdown file, a heading it has.
func TestLinksResolve(t *testing.T) {
	for _, f := range documents(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target, frag := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path := f
			if target != "" {
				path = filepath.Join(filepath.Dir(f), target)
			}
			body, err := os.ReadFile(path)
			if err != nil {
				if _, serr := os.Stat(path); serr != nil {
					t.Errorf("%s links to %s, which does not exist", f, target)
				}
				continue
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			found := false
			for _, h := range heading.FindAllStringSubmatch(string(body), -1) {
				if anchor(strings.Trim(h[1], "`")) == frag || anchor(strings.ReplaceAll(h[1], "`", "")) == frag {
					found = true
				}
			}
			if !found {
				t.Errorf("%s links to %s#%s: no such heading", f, target, frag)
			}
		}
	}
}

// TestCodeCommentsSayWhy: the Go sources' comments say why, not which
// tracker issue added a line (a tracker number tells the next reader nothing).
func TestCodeCommentsSayWhy(t *testing.T) {
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || filepath.Base(path) == "docs_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			_, comment, ok := strings.Cut(line, "//")
			if !ok {
				continue
			}
			if m := trackerWords.FindString(comment); m != "" {
				t.Errorf("%s:%d: a comment speaks of %q", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
