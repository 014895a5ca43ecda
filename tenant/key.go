package tenant

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeyPrefix starts every raw key, as LoxiLB's do; scanners and clients can
// recognise a leaked key by it.
const KeyPrefix = "lxb_"

const (
	idBytes     = 8  // 16 hex digits: the record id
	secretBytes = 32 // 256 bits of secret
	saltBytes   = 16
	// maxSecretLen bounds the secret part of a presented key (ours are 43).
	maxSecretLen = 128
	// hashScheme names the stored hash format so it can change later.
	hashScheme = "sha256"
)

// Secret is a raw API key. It never prints or encodes itself: only Reveal
// gives the text, so a Secret that ends up in a log line or a JSON body by
// mistake shows as redacted.
type Secret struct{ s string }

// Reveal returns the raw key text.
func (s Secret) Reveal() string { return s.s }

// String redacts.
func (s Secret) String() string { return "[redacted]" }

// GoString redacts (%#v).
func (s Secret) GoString() string { return "tenant.Secret{[redacted]}" }

// MarshalJSON redacts.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }

// KeyHash is what is stored of a key: salt and SHA-256(salt ‖ secret), in
// the text form "sha256$<salt hex>$<hash hex>". Secrets are 256-bit random
// values, so a fast salted hash is enough (no password stretching needed).
type KeyHash struct {
	salt [saltBytes]byte
	sum  [sha256.Size]byte
}

// String is the stored text form.
func (h KeyHash) String() string {
	return hashScheme + "$" + hex.EncodeToString(h.salt[:]) + "$" + hex.EncodeToString(h.sum[:])
}

// ParseKeyHash reads the text form written by KeyHash.String.
func ParseKeyHash(s string) (KeyHash, error) {
	var h KeyHash
	parts := strings.Split(s, "$")
	if len(parts) != 3 || parts[0] != hashScheme {
		return h, fmt.Errorf("key hash must look like %s$<salt hex>$<hash hex>", hashScheme)
	}
	salt, err := hex.DecodeString(parts[1])
	if err != nil || len(salt) != saltBytes {
		return h, fmt.Errorf("key hash salt must be %d hex-encoded bytes", saltBytes)
	}
	sum, err := hex.DecodeString(parts[2])
	if err != nil || len(sum) != sha256.Size {
		return h, fmt.Errorf("key hash must be %d hex-encoded bytes", sha256.Size)
	}
	copy(h.salt[:], salt)
	copy(h.sum[:], sum)
	return h, nil
}

// matches reports in constant time whether secret hashes to h. It hashes
// from a stack buffer, so checking a key allocates nothing.
func (h KeyHash) matches(secret string) bool {
	var buf [saltBytes + maxSecretLen]byte
	if len(secret) > maxSecretLen {
		return false
	}
	n := copy(buf[:], h.salt[:])
	n += copy(buf[n:], secret)
	got := sha256.Sum256(buf[:n])
	return subtle.ConstantTimeCompare(got[:], h.sum[:]) == 1
}

func hashSecret(secret []byte) (KeyHash, error) {
	var h KeyHash
	if _, err := rand.Read(h.salt[:]); err != nil {
		return h, fmt.Errorf("tenant: read random salt: %w", err)
	}
	d := sha256.New()
	d.Write(h.salt[:])
	d.Write(secret)
	d.Sum(h.sum[:0])
	return h, nil
}

// Minted is a freshly generated key: its id, the raw key (shown once) and
// the hash to store.
type Minted struct {
	ID   string
	Raw  Secret
	Hash KeyHash
}

// Mint generates a new random key. It is what Create uses, and what an
// operator runs offline (`infergate apikey mint`) to put only the hash in Git.
func Mint() (Minted, error) {
	var id [idBytes]byte
	var secret [secretBytes]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Minted{}, fmt.Errorf("tenant: read random id: %w", err)
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return Minted{}, fmt.Errorf("tenant: read random secret: %w", err)
	}
	enc := base64.RawURLEncoding.EncodeToString(secret[:])
	h, err := hashSecret([]byte(enc))
	if err != nil {
		return Minted{}, err
	}
	idHex := hex.EncodeToString(id[:])
	return Minted{ID: idHex, Raw: Secret{KeyPrefix + idHex + "_" + enc}, Hash: h}, nil
}

var errKeyFormat = errors.New("not an infergate API key")

// splitKey parses "lxb_<16 hex>_<secret>" without allocating: the id and the
// secret are sub-slices of raw.
func splitKey(raw string) (id, secret string, err error) {
	if !strings.HasPrefix(raw, KeyPrefix) {
		return "", "", errKeyFormat
	}
	rest := raw[len(KeyPrefix):]
	if len(rest) < 2*idBytes+2 || rest[2*idBytes] != '_' {
		return "", "", errKeyFormat
	}
	id, secret = rest[:2*idBytes], rest[2*idBytes+1:]
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", "", errKeyFormat
		}
	}
	if len(secret) == 0 || len(secret) > maxSecretLen {
		return "", "", errKeyFormat
	}
	return id, secret, nil
}

// validID reports whether s is a key id (16 lower-case hex digits).
func validID(s string) bool {
	if len(s) != 2*idBytes {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}
