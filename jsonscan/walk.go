package jsonscan

import "errors"

// Mode says how much a walk trusts its input (see the package comment).
type Mode uint8

const (
	// Loose follows the structure only (SkipValue).
	Loose Mode = iota
	// Strict validates every member as encoding/json would (ScanNested).
	Strict
)

// ErrSyntax is what a walk reports when the input breaks the grammar of its
// mode.
var ErrSyntax = errors.New("jsonscan: invalid JSON")

// Member is one object member, as spans of the walked input.
type Member struct {
	Key     Span // the name's bytes between its quotes, escapes not decoded
	Value   Span // the raw value
	Escaped bool // the name holds a backslash escape (compare with Equal)
}

// KeyIs reports whether the member's name, escapes decoded, is name.
func (m Member) KeyIs(b []byte, name string) bool {
	k := b[m.Key.Start:m.Key.End]
	if !m.Escaped {
		return string(k) == name
	}
	return Equal(k, name)
}

// Members walks the members of an object. Use it as
//
//	it := jsonscan.Members(body, i, jsonscan.Loose)
//	for it.Next() { m := it.Member(); … }
//	if it.Err() != nil { … }
//
// Nothing is allocated; a member's spans point into the walked bytes.
type Members struct {
	b     []byte
	pos   int
	n     int
	depth int
	mode  Mode
	cur   Member
	err   error
	done  bool
}

// ObjectMembers starts a walk of the object whose '{' is at b[i], a value at
// the top of its document.
func ObjectMembers(b []byte, i int, mode Mode) Members {
	it := Members{b: b, pos: i + 1, mode: mode, depth: 1}
	if i >= len(b) || b[i] != '{' {
		it.err, it.done = ErrSyntax, true
	}
	return it
}

// Next moves to the next member and reports whether there is one.
func (it *Members) Next() bool {
	if it.done {
		return false
	}
	b := it.b
	i, done, ok := Step(b, it.pos, it.n, '}')
	if done {
		it.pos, it.done = i, true
		return false
	}
	if !ok || b[i] != '"' {
		return it.fail()
	}
	var m Member
	m.Key.Start = i + 1
	var end int
	if it.mode == Strict {
		end, m.Escaped, ok = ScanString(b, i)
	} else {
		end, m.Escaped, ok = skipKey(b, i)
	}
	if !ok {
		return it.fail()
	}
	m.Key.End = end - 1
	i = SkipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return it.fail()
	}
	i = SkipSpace(b, i+1)
	m.Value.Start = i
	if it.mode == Strict {
		i, ok = ScanNested(b, i, it.depth)
	} else {
		i, ok = SkipValue(b, i)
	}
	if !ok {
		return it.fail()
	}
	m.Value.End = i
	it.cur, it.pos = m, i
	it.n++
	return true
}

func (it *Members) fail() bool {
	it.err, it.done = ErrSyntax, true
	return false
}

// Member is the member Next moved to.
func (it *Members) Member() Member { return it.cur }

// Err is nil while walking and after the object closed; ErrSyntax once the
// input broke the grammar.
func (it *Members) Err() error { return it.err }

// End is the index just past the closing '}' once Next has returned false
// with a nil Err.
func (it *Members) End() int { return it.pos }

// skipKey is SkipString for a member name, which is short: one byte loop
// that also notes whether the name needs decoding.
func skipKey(b []byte, i int) (end int, escaped, ok bool) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i + 1, escaped, true
		case '\\':
			escaped = true
			i++
		}
	}
	return len(b), false, false
}

// Elements walks the elements of an array as spans, like Members.
type Elements struct {
	b    []byte
	pos  int
	n    int
	mode Mode
	cur  Span
	err  error
	done bool
}

// ArrayElements starts a walk of the array whose '[' is at b[i], a value at
// the top of its document.
func ArrayElements(b []byte, i int, mode Mode) Elements {
	it := Elements{b: b, pos: i + 1, mode: mode}
	if i >= len(b) || b[i] != '[' {
		it.err, it.done = ErrSyntax, true
	}
	return it
}

// Next moves to the next element and reports whether there is one.
func (it *Elements) Next() bool {
	if it.done {
		return false
	}
	i, done, ok := Step(it.b, it.pos, it.n, ']')
	if done {
		it.pos, it.done = i, true
		return false
	}
	end := i
	if ok {
		if it.mode == Strict {
			end, ok = ScanNested(it.b, i, 1)
		} else {
			end, ok = SkipValue(it.b, i)
		}
	}
	if !ok {
		it.err, it.done = ErrSyntax, true
		return false
	}
	it.cur, it.pos = Span{i, end}, end
	it.n++
	return true
}

// Element is the span of the element Next moved to.
func (it *Elements) Element() Span { return it.cur }

// Err is nil while walking and after the array closed; ErrSyntax once the
// input broke the grammar.
func (it *Elements) Err() error { return it.err }

// End is the index just past the closing ']' once Next has returned false
// with a nil Err.
func (it *Elements) End() int { return it.pos }
