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

// walk is the state an object or array walk shares: where it is, how many
// entries it has passed, and how it ended.
type walk struct {
	b    []byte
	pos  int
	n    int
	mode Mode
	err  error
	done bool
}

func newWalk(b []byte, i int, open byte, mode Mode) walk {
	w := walk{b: b, pos: i + 1, mode: mode}
	if i >= len(b) || b[i] != open {
		w.err, w.done = ErrSyntax, true
	}
	return w
}

// step moves to the next entry (Step), ending the walk at the closing
// bracket or at a syntax error.
func (w *walk) step(closing byte) (i int, more bool) {
	if w.done {
		return 0, false
	}
	i, done, ok := Step(w.b, w.pos, w.n, closing)
	switch {
	case done:
		w.pos, w.done = i, true
		return 0, false
	case !ok:
		return 0, w.fail()
	}
	return i, true
}

// value moves past the value at b[i] as the mode says; depth counts the
// containers around it.
func (w *walk) value(i, depth int) (end int, ok bool) {
	if w.mode == Strict {
		return ScanNested(w.b, i, depth)
	}
	return SkipValue(w.b, i)
}

func (w *walk) fail() bool {
	w.err, w.done = ErrSyntax, true
	return false
}

// Err is nil while walking and after the container closed; ErrSyntax once
// the input broke the grammar.
func (w *walk) Err() error { return w.err }

// End is the index just past the closing bracket once Next has returned
// false with a nil Err.
func (w *walk) End() int { return w.pos }

// Members walks the members of an object. Use it as
//
//	it := jsonscan.ObjectMembers(body, i, jsonscan.Loose)
//	for it.Next() { m := it.Member(); … }
//	if it.Err() != nil { … }
//
// Nothing is allocated; a member's spans point into the walked bytes.
type Members struct {
	walk
	cur Member
}

// ObjectMembers starts a walk of the object whose '{' is at b[i], a value at
// the top of its document.
func ObjectMembers(b []byte, i int, mode Mode) Members {
	return Members{walk: newWalk(b, i, '{', mode)}
}

// Next moves to the next member and reports whether there is one.
func (it *Members) Next() bool {
	if it.done {
		return false
	}
	b, i := it.b, it.pos
	if it.n > 0 && i+1 < len(b) && b[i] == ',' && b[i+1] == '"' {
		i++ // compact JSON, the common case: no call to Step
	} else {
		var more bool
		if i, more = it.step('}'); !more {
			return false
		}
		if b[i] != '"' {
			return it.fail()
		}
	}
	var (
		m   Member
		end int
		ok  bool
	)
	m.Key.Start = i + 1
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
	m.Value.Start = SkipSpace(b, i+1)
	if it.mode == Strict {
		m.Value.End, ok = ScanNested(b, m.Value.Start, 1)
	} else {
		m.Value.End, ok = SkipValue(b, m.Value.Start)
	}
	if !ok {
		return it.fail()
	}
	it.cur, it.pos = m, m.Value.End
	it.n++
	return true
}

// Member is the member Next moved to.
func (it *Members) Member() Member { return it.cur }

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
	walk
	cur Span
}

// ArrayElements starts a walk of the array whose '[' is at b[i], a value at
// the top of its document.
func ArrayElements(b []byte, i int, mode Mode) Elements {
	return Elements{walk: newWalk(b, i, '[', mode)}
}

// Next moves to the next element and reports whether there is one.
func (it *Elements) Next() bool {
	i, more := it.step(']')
	if !more {
		return false
	}
	end, ok := it.value(i, 1)
	if !ok {
		return it.fail()
	}
	it.cur, it.pos = Span{i, end}, end
	it.n++
	return true
}

// Element is the span of the element Next moved to.
func (it *Elements) Element() Span { return it.cur }
