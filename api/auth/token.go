package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
)

// redacted is what a Token prints as, whatever the verb.
const redacted = "[redacted]"

// Token is a bearer credential. Its value is reachable only through Reveal,
// so formatting, logging or JSON-encoding a Token (or a struct holding one)
// cannot leak it.
type Token struct{ secret string }

// NewToken wraps s.
func NewToken(s string) Token { return Token{secret: s} }

// Reveal returns the secret, for the one place that must send it (the
// Authorization header).
func (t Token) Reveal() string { return t.secret }

// IsZero reports whether no token is set.
func (t Token) IsZero() bool { return t.secret == "" }

func (t Token) String() string   { return redacted }
func (t Token) GoString() string { return redacted }

// Format makes every fmt verb (%s %v %q %x %#v …) print the redaction.
func (t Token) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// MarshalJSON and MarshalText redact, so encoders never see the secret.
func (t Token) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }
func (t Token) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// Kind is what a token may do.
type Kind int

const (
	// ReadOnly may call routes that change nothing.
	ReadOnly Kind = iota + 1
	// ReadWrite may call every route.
	ReadWrite
)

func (k Kind) String() string {
	switch k {
	case ReadOnly:
		return "ro"
	case ReadWrite:
		return "rw"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// digest is a token's SHA-256. Comparing digests makes the comparison
// independent of the presented token's length.
type digest [sha256.Size]byte

type entry struct {
	sum  digest
	kind Kind
}

// Set is an immutable set of tokens, held as digests.
type Set struct{ entries []entry }

// Len is the number of tokens.
func (s *Set) Len() int { return len(s.entries) }

// Lookup returns the kind of presented, comparing it in constant time with
// every token of the set (all are compared even after a match).
func (s *Set) Lookup(presented Token) (Kind, bool) {
	if s == nil || presented.IsZero() {
		return 0, false
	}
	sum := digest(sha256.Sum256([]byte(presented.secret)))
	var found Kind
	for i := range s.entries {
		match := subtle.ConstantTimeCompare(sum[:], s.entries[i].sum[:])
		// Select without a data-dependent branch.
		found = Kind(subtle.ConstantTimeSelect(match, int(s.entries[i].kind), int(found)))
	}
	return found, found != 0
}
