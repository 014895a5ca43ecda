package tlsmat

import "fmt"

// MaterialError is a certificate, key, CA or CRL that cannot be used. The
// API turns it into a 400 naming the hostname and file.
type MaterialError struct {
	Hostname string // "" for the default certificate or a non-SNI file
	File     string // the path that failed
	Reason   string // short, human: "certificate expired at ...", "key does not match"
	Err      error
}

func (e *MaterialError) Error() string {
	s := e.Reason
	if e.File != "" {
		s = e.File + ": " + s
	}
	if e.Hostname != "" {
		s = "hostname " + e.Hostname + ": " + s
	}
	if e.Err != nil {
		s += fmt.Sprintf(" (%v)", e.Err)
	}
	return s
}

func (e *MaterialError) Unwrap() error { return e.Err }

// Secret is key material carried in configuration (inline PEM). It never
// prints or marshals its value.
type Secret string

const redacted = "<redacted>"

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from leaking the value.
func (s Secret) GoString() string { return s.String() }

// MarshalJSON writes the redaction marker, never the key.
func (s Secret) MarshalJSON() ([]byte, error) {
	if s == "" {
		return []byte(`""`), nil
	}
	return []byte(`"` + redacted + `"`), nil
}

// Redacted is the marker GET shows in place of inline key material.
const Redacted = redacted
