package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzScan holds the package to encoding/json on any input: the same
// validity verdict, and on valid documents the same members, elements,
// decoded strings (and key comparisons), integers and booleans, in both
// walk modes.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hi","stream":true,"max_tokens":16}`,
		`{"strea\u006d":true,"max_toke\u006es":5,"a":[1,2,{"b":null}]}`,
		`{"s":"caf\u00e9 \ud83d\ude00 \ud800 \"q\" \\ \/ \b\f\n\r\t"}`,
		` [ 1 , -0.5e+3 , "x" , [ ] , { } , false ] `,
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `"\x"`, `"\u12"`, "\"\x01\"", `01`, `-`, `1.`, `1e`, `tru`,
		"\"\xff\xfe\"", `{"\u00e9":1,"\u00E9":2}`, `{"a":1}{`, `[[[[[]]]]]`, `9223372036854775808`,
		`-9223372036854775808`, `4294967296`, `{"a":"\\\"","b":"\\\\"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		want := json.Valid(in)
		if got := Valid(in); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", in, got, want)
		}
		i := SkipSpace(in, 0)
		// A loose skip never reads past the input, whatever it is given.
		if end, _ := SkipValue(in, i); end > len(in) {
			t.Fatalf("SkipValue(%q) ended at %d", in, end)
		}
		if !want {
			return
		}
		end, ok := SkipValue(in, i)
		if !ok || SkipSpace(in, end) != len(in) {
			t.Fatalf("SkipValue(%q) = %d, %v on a valid document", in, end, ok)
		}
		checkValue(t, in, Span{i, end})
		switch in[i] {
		case '{':
			for _, mode := range []Mode{Loose, Strict} {
				checkObject(t, in, i, mode)
			}
		case '[':
			for _, mode := range []Mode{Loose, Strict} {
				checkArray(t, in, i, mode)
			}
		}
	})
}

// checkValue compares one valid value with encoding/json's reading of it.
func checkValue(t *testing.T, in []byte, s Span) {
	v := s.Of(in)
	if se, ok := SkipValue(in, s.Start); !ok || se != s.End {
		t.Fatalf("SkipValue(%q) = %d, want %d", v, se, s.End)
	}
	if se, ok := ScanValue(in, s.Start); !ok || se != s.End {
		t.Fatalf("ScanValue(%q) = %d, want %d", v, se, s.End)
	}
	switch c := v[0]; {
	case c == '"':
		checkString(t, v)
	case c == 't' || c == 'f':
		var want bool
		got, ok := Bool(v)
		if json.Unmarshal(v, &want) != nil || !ok || got != want {
			t.Fatalf("Bool(%q) = %v, %v; encoding/json %v", v, got, ok, want)
		}
	case c == '-' || isDigit(c):
		var wi int64
		gi, err := ParseInt(v)
		if werr := json.Unmarshal(v, &wi); (werr == nil) != (err == nil) || gi != wi {
			t.Fatalf("ParseInt(%q) = %d, %v; encoding/json %d, %v", v, gi, err, wi, werr)
		}
		var wu uint32
		gu, err := ParseUint(v, 32)
		if werr := json.Unmarshal(v, &wu); (werr == nil) != (err == nil) || gu != uint64(wu) {
			t.Fatalf("ParseUint(%q, 32) = %d, %v; encoding/json %d, %v", v, gu, err, wu, werr)
		}
	}
}

// checkString compares the decoders with encoding/json on a valid literal.
func checkString(t *testing.T, lit []byte) {
	var want string
	if err := json.Unmarshal(lit, &want); err != nil {
		t.Fatalf("encoding/json refused a valid string %q: %v", lit, err)
	}
	end, ok := SkipString(lit, 0)
	send, _, sok := ScanString(lit, 0)
	if !ok || !sok || end != len(lit) || send != len(lit) {
		t.Fatalf("string %q: SkipString %d %v, ScanString %d %v", lit, end, ok, send, sok)
	}
	raw := lit[1 : len(lit)-1]
	if got, err := String(raw); err != nil || got != want {
		t.Fatalf("String(%q) = %q, %v; want %q", raw, got, err, want)
	}
	if got, err := AppendString([]byte("pre"), raw); err != nil || string(got) != "pre"+want {
		t.Fatalf("AppendString(%q) = %q, %v; want %q", raw, got, err, want)
	}
	if utf8.Valid(raw) {
		if got, err := AppendUnescaped([]byte("pre"), raw); err != nil || string(got) != "pre"+want {
			t.Fatalf("AppendUnescaped(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	if utf8.ValidString(want) && !strings.ContainsRune(want, utf8.RuneError) && !Equal(raw, want) {
		t.Fatalf("Equal(%q, %q) = false", raw, want)
	}
	if Equal(raw, want+"x") || Equal(raw, "stream") != (want == "stream") {
		t.Fatalf("Equal(%q) matches a name it does not decode to", raw)
	}
}

// checkObject walks a valid object and compares it with encoding/json's map
// (the last of duplicate names wins, names compared decoded).
func checkObject(t *testing.T, in []byte, i int, mode Mode) {
	var want map[string]json.RawMessage
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatalf("encoding/json refused a valid object %q: %v", in, err)
	}
	got := map[string][]byte{}
	it := ObjectMembers(in, i, mode)
	for it.Next() {
		m := it.Member()
		name, err := String(m.Key.Of(in))
		if err != nil {
			t.Fatalf("mode %d: key %q: %v", mode, m.Key.Of(in), err)
		}
		if m.Escaped != bytes.Contains(m.Key.Of(in), []byte(`\`)) {
			t.Fatalf("mode %d: key %q: Escaped = %v", mode, m.Key.Of(in), m.Escaped)
		}
		if !m.KeyIs(in, name) && utf8.ValidString(name) && !strings.ContainsRune(name, utf8.RuneError) {
			t.Fatalf("mode %d: KeyIs(%q) false for its own name", mode, name)
		}
		got[name] = m.Value.Of(in)
		checkValue(t, in, m.Value)
	}
	if it.Err() != nil || SkipSpace(in, it.End()) != len(in) {
		t.Fatalf("mode %d: walk of %q: err %v, end %d", mode, in, it.Err(), it.End())
	}
	// encoding/json merges names case-insensitively into a map only when
	// the target is a struct; into a map it keeps exact names.
	if len(got) != len(want) {
		t.Fatalf("mode %d: %d members, encoding/json %d: %q", mode, len(got), len(want), in)
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("mode %d: member %q = %q, encoding/json %q", mode, k, got[k], v)
		}
	}
}

// checkArray walks a valid array and compares it with encoding/json's.
func checkArray(t *testing.T, in []byte, i int, mode Mode) {
	var want []json.RawMessage
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatalf("encoding/json refused a valid array %q: %v", in, err)
	}
	it := ArrayElements(in, i, mode)
	n := 0
	for ; it.Next(); n++ {
		e := it.Element()
		if n >= len(want) || !bytes.Equal(e.Of(in), want[n]) {
			t.Fatalf("mode %d: element %d = %q of %q", mode, n, e.Of(in), in)
		}
		checkValue(t, in, e)
	}
	if it.Err() != nil || n != len(want) || SkipSpace(in, it.End()) != len(in) {
		t.Fatalf("mode %d: walk of %q: err %v, %d of %d elements", mode, in, it.Err(), n, len(want))
	}
}
