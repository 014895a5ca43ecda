package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"strings"
)

// Token file syntax; see doc.go.
const (
	prefixReadOnly  = "ro:"
	prefixReadWrite = "rw:"
	commentMark     = "#"
	minTokenLen     = 16
	maxTokenLen     = 4096
	// maxTokenFileBytes bounds what a reload reads: a token file is a few
	// lines; anything larger is a mistake (a wrong path).
	maxTokenFileBytes = 1 << 20
)

// ParseTokens parses a token file. Errors name the line number, never its
// content, because the line may be a secret.
func ParseTokens(data []byte) (*Set, error) {
	set := &Set{}
	seen := map[digest]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxTokenFileBytes)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], commentMark) {
			continue
		}
		if len(fields) > 1 && !strings.HasPrefix(fields[1], commentMark) {
			return nil, fmt.Errorf("line %d: one token per line; text after it must start with %q", n, commentMark)
		}
		kind, raw := ReadWrite, fields[0]
		switch {
		case strings.HasPrefix(raw, prefixReadOnly):
			kind, raw = ReadOnly, raw[len(prefixReadOnly):]
		case strings.HasPrefix(raw, prefixReadWrite):
			raw = raw[len(prefixReadWrite):]
		case strings.Contains(raw, ":"):
			return nil, fmt.Errorf("line %d: unknown token kind (want %q or %q)", n, prefixReadOnly, prefixReadWrite)
		}
		if err := checkTokenSyntax(raw); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		sum := digest(sha256.Sum256([]byte(raw)))
		if first, dup := seen[sum]; dup {
			return nil, fmt.Errorf("line %d: repeats the token of line %d", n, first)
		}
		seen[sum] = n
		set.entries = append(set.entries, entry{sum: sum, kind: kind})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	if set.Len() == 0 {
		return nil, fmt.Errorf("no token in the file (an empty token file would lock every operator out)")
	}
	return set, nil
}

// checkTokenSyntax enforces RFC 6750's b64token alphabet and a minimum
// length, so a guessable "changeme" or a pasted line with quotes fails at
// load instead of silently never matching.
func checkTokenSyntax(s string) error {
	if len(s) < minTokenLen {
		return fmt.Errorf("token shorter than %d characters (make one with `openssl rand -hex 32`)", minTokenLen)
	}
	if len(s) > maxTokenLen {
		return fmt.Errorf("token longer than %d characters", maxTokenLen)
	}
	body := strings.TrimRight(s, "=")
	if body == "" {
		return fmt.Errorf("token is only padding")
	}
	for i := 0; i < len(body); i++ {
		if !isTokenChar(body[i]) {
			return fmt.Errorf("token has a character outside A-Z a-z 0-9 - . _ ~ + / = (column %d)", i+1)
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~+/", c) >= 0
}

// readTokenFile reads path with a size bound.
func readTokenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxTokenFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes; is it the right file?", path, maxTokenFileBytes)
	}
	return data, nil
}

// ReadClientToken reads the token a client sends from a file holding one
// token line (comments and blank lines allowed, an ro:/rw: prefix is
// stripped), so an operator can hand out a one-line copy of a server line.
func ReadClientToken(path string) (Token, error) {
	data, err := readTokenFile(path)
	if err != nil {
		return Token{}, fmt.Errorf("read token file: %w", err)
	}
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], commentMark) {
			continue
		}
		raw := strings.TrimPrefix(strings.TrimPrefix(fields[0], prefixReadOnly), prefixReadWrite)
		found = append(found, raw)
	}
	switch len(found) {
	case 0:
		return Token{}, fmt.Errorf("token file %s holds no token", path)
	case 1:
		return NewToken(found[0]), nil
	}
	return Token{}, fmt.Errorf("token file %s holds %d tokens; a client file holds exactly one", path, len(found))
}
