package jsonscan

import "bytes"

// SkipString moves past the string starting at b[i] (a quote) without
// validating it and returns the index just past the closing quote. It jumps
// quote to quote (bytes.IndexByte) and takes a quote as closing when an even
// number of backslashes precedes it, so a long prompt costs one vector scan.
func SkipString(b []byte, i int) (end int, ok bool) {
	start := i + 1
	for i = start; ; {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b), false
		}
		q := i + j
		bs := 0
		for k := q - 1; k >= start && b[k] == '\\'; k-- {
			bs++
		}
		i = q + 1
		if bs%2 == 0 {
			return i, true
		}
	}
}

// SkipValue moves past the value starting at b[i] without validating it:
// strings honour escapes, containers are matched by depth (of any bracket
// kind), and a scalar runs to the next ',', '}', ']' or whitespace and must
// not be empty.
func SkipValue(b []byte, i int) (end int, ok bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				var ok bool
				if i, ok = SkipString(b, i); !ok {
					return i, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return i, false
	default: // number, true, false, null
		start := i
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i, i > start
			}
			i++
		}
		return i, i > start
	}
}
