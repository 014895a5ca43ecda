package jsonscan

import (
	"bytes"
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// Errors of the decoders, for a string body or number the scan did not
// validate.
var (
	ErrEscape = errors.New("jsonscan: invalid escape")
	ErrNumber = errors.New("jsonscan: not an integer in range")
)

// AppendUnescaped appends the string body raw (the bytes between the
// quotes) to dst with its escapes decoded; every other byte is copied as it
// is, invalid UTF-8 included. That is encoding/json's decoding for valid
// UTF-8 input, at memmove speed when raw has no backslash.
func AppendUnescaped(dst, raw []byte) ([]byte, error) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return append(dst, raw...), nil
	}
	return appendDecoded(dst, raw, false)
}

// String decodes the string body raw exactly as encoding/json decodes a
// string: escapes, surrogate pairs, and U+FFFD for a lone surrogate or an
// invalid UTF-8 byte. A plain body costs one allocation (the string).
func String(raw []byte) (string, error) {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw), nil
	}
	b, err := appendDecoded(make([]byte, 0, len(raw)), raw, true)
	return string(b), err
}

// AppendString appends to dst what String decodes raw to, for a caller
// that decodes many strings into one buffer of its own.
func AppendString(dst, raw []byte) ([]byte, error) {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return append(dst, raw...), nil
	}
	return appendDecoded(dst, raw, true)
}

// Equal reports whether the string body raw decodes (as String does) to
// name, which must be valid UTF-8 without U+FFFD, as field names are. A key
// without a backslash costs one byte comparison; an escaped one is decoded
// on the stack.
func Equal(raw []byte, name string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	// A decoded byte takes at most 6 raw bytes (\u00XX), so a longer raw
	// body cannot decode to name.
	if len(raw) > 6*len(name) {
		return false
	}
	var buf [64]byte
	d, err := appendDecoded(buf[:0], raw, true)
	return err == nil && string(d) == name
}

// appendDecoded decodes the escapes of raw onto dst; repair replaces
// invalid UTF-8 bytes with U+FFFD as encoding/json does.
// The text between escapes is copied a run at a time (a prompt's escapes
// are dozens of bytes apart); only a run that is not valid UTF-8, under
// repair, is walked rune by rune.
func appendDecoded(dst, raw []byte, repair bool) ([]byte, error) {
	for i := 0; i < len(raw); {
		if raw[i] != '\\' {
			j := bytes.IndexByte(raw[i:], '\\')
			if j < 0 {
				j = len(raw) - i
			}
			dst = appendRun(dst, raw[i:i+j], repair)
			i += j
			continue
		}
		if i+1 >= len(raw) {
			return dst, ErrEscape
		}
		i += 2
		switch e := raw[i-1]; e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(raw[i:])
			if !ok {
				return dst, ErrEscape
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := hex4(raw[min(i+2, len(raw)):])
				if dec := utf16.DecodeRune(r, r2); ok && i+1 < len(raw) && raw[i] == '\\' && raw[i+1] == 'u' && dec != utf8.RuneError {
					i += 6
					r = dec
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, ErrEscape
		}
	}
	return dst, nil
}

// appendRun appends run, which holds no backslash; repair replaces its
// invalid UTF-8 bytes with U+FFFD.
func appendRun(dst, run []byte, repair bool) []byte {
	if !repair || utf8.Valid(run) {
		return append(dst, run...)
	}
	for i := 0; i < len(run); {
		c := run[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(run[i:])
		if r == utf8.RuneError && size == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, run[i:i+size]...)
		}
		i += size
	}
	return dst
}

// ParseInt reads a JSON number literal as an int64 the way encoding/json
// fills an integer field: no fraction, no exponent, no overflow.
func ParseInt(lit []byte) (int64, error) {
	neg := len(lit) > 0 && lit[0] == '-'
	u, err := parseDigits(lit[min(len(lit), b2i(neg)):])
	switch {
	case err != nil:
		return 0, err
	case neg && u <= 1<<63:
		return -int64(u), nil
	case !neg && u < 1<<63:
		return int64(u), nil
	}
	return 0, ErrNumber
}

// ParseUint reads a JSON number literal as an unsigned integer of bits bits
// the way encoding/json fills an unsigned field ("-0" included: refused).
func ParseUint(lit []byte, bits int) (uint64, error) {
	u, err := parseDigits(lit)
	if err != nil || bits < 64 && u >= 1<<bits {
		return 0, ErrNumber
	}
	return u, nil
}

// parseDigits reads a non-empty run of decimal digits that fits a uint64.
func parseDigits(d []byte) (uint64, error) {
	if len(d) == 0 {
		return 0, ErrNumber
	}
	var u uint64
	for _, c := range d {
		if !isDigit(c) || u > (1<<64-1)/10 {
			return 0, ErrNumber
		}
		v := u*10 + uint64(c-'0')
		if v < u {
			return 0, ErrNumber
		}
		u = v
	}
	return u, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Bool reads the literal true or false.
func Bool(lit []byte) (v, ok bool) {
	switch string(lit) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}
