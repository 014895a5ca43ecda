package jsonscan

import (
	"errors"
	"math/bits"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	tests := []struct {
		in   string
		want bool
	}{
		{`{"a":[1,-2.5e+3,true,false,null,"x\u00e9\n"]}`, true},
		{" \t\r\n{} ", true},
		{`{"a":1,}`, false},
		{`[1,]`, false},
		{`{"a" 1}`, false},
		{`{1:2}`, false},
		{`"\q"`, false},
		{`"\u12g4"`, false},
		{"\"a\x1fb\"", false},
		{"\"\xff\"", true}, // encoding/json accepts invalid UTF-8 and repairs it on decode
		{`01`, false},
		{`-`, false},
		{`1.`, false},
		{`1e+`, false},
		{`nul`, false},
		{`{} {}`, false},
		{``, false},
		{deep, true},
		{"[" + deep + "]", false},
	}
	for _, tt := range tests {
		if got := Valid([]byte(tt.in)); got != tt.want {
			t.Errorf("Valid(%.40q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestSkipLoose(t *testing.T) {
	tests := []struct {
		in     string
		end    int
		wantOK bool
	}{
		{`"a\"b\\"x`, 8, true},
		{`"abc`, 4, false},
		{`{"a":"]"},`, 9, true},
		{`[1,{"b":[]}] `, 12, true},
		{`tru,`, 3, true}, // loose: a scalar is not validated
		{`,`, 0, false},
		{`[1,2`, 4, false},
	}
	for _, tt := range tests {
		end, ok := SkipValue([]byte(tt.in), 0)
		if ok != tt.wantOK || ok && end != tt.end {
			t.Errorf("SkipValue(%q) = %d, %v; want %d, %v", tt.in, end, ok, tt.end, tt.wantOK)
		}
	}
}

func TestMembers(t *testing.T) {
	body := []byte(` {"model" : "m", "strea\u006d":true, "n":[1,{"x":"}"}] } `)
	type kv struct{ k, v string }
	want := []kv{{"model", `"m"`}, {"stream", "true"}, {"n", `[1,{"x":"}"}]`}}
	for _, mode := range []Mode{Loose, Strict} {
		it := ObjectMembers(body, 1, mode)
		var got []kv
		for it.Next() {
			m := it.Member()
			k, err := String(m.Key.Of(body))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, kv{k, string(m.Value.Of(body))})
		}
		if it.Err() != nil || it.End() != len(body)-1 || len(got) != len(want) {
			t.Fatalf("mode %d: err %v end %d members %q", mode, it.Err(), it.End(), got)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("mode %d: member %d = %q, want %q", mode, i, got[i], want[i])
			}
		}
	}
	for _, bad := range []string{`{"a":1,}`, `{"a":1 "b":2}`, `{"a"}`, `["a"]`, `{"a":1`} {
		it := ObjectMembers([]byte(bad), 0, Strict)
		for it.Next() {
		}
		if !errors.Is(it.Err(), ErrSyntax) {
			t.Errorf("ObjectMembers(%q): err %v, want ErrSyntax", bad, it.Err())
		}
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		raw, want string
		err       bool
	}{
		{`plain`, "plain", false},
		{`a\"b\\c\/d\b\f\n\r\t`, "a\"b\\c/d\b\f\n\r\t", false},
		{`caf\u00e9 \ud83d\ude00`, "café 😀", false},
		{`\ud800x`, "\uFFFDx", false},
		{`\ud800\u0041`, "\uFFFDA", false},
		{`\udc00`, "\uFFFD", false},
		{`\q`, "", true},
		{`\u00`, "", true},
		{`a\`, "", true},
	}
	for _, tt := range tests {
		got, err := String([]byte(tt.raw))
		if (err != nil) != tt.err || err == nil && got != tt.want {
			t.Errorf("String(%q) = %q, %v; want %q (err %v)", tt.raw, got, err, tt.want, tt.err)
		}
	}
	// String repairs invalid UTF-8 as encoding/json does; AppendUnescaped
	// keeps it as it is.
	if got, _ := String([]byte("a\xffb")); got != "a\uFFFDb" {
		t.Errorf("String repairs to %q", got)
	}
	if got, _ := AppendUnescaped(nil, []byte(`a\u0041`+"\xff")); string(got) != "aA\xff" {
		t.Errorf("AppendUnescaped = %q", got)
	}
}

func TestEqual(t *testing.T) {
	tests := []struct {
		raw, name string
		want      bool
	}{
		{`stream`, "stream", true},
		{`strea\u006d`, "stream", true},
		{`\u0073\u0074\u0072\u0065\u0061\u006d`, "stream", true},
		{`max_toke\u006es`, "max_tokens", true},
		{`Stream`, "stream", false}, // engines match names exactly
		{`strea\u006d `, "stream", false},
		{`strea\q`, "stream", false},
		{`stream\u0000`, "stream", false},
	}
	for _, tt := range tests {
		if got := Equal([]byte(tt.raw), tt.name); got != tt.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tt.raw, tt.name, got, tt.want)
		}
	}
}

func TestNumbers(t *testing.T) {
	ints := []struct {
		lit  string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {"42", 42, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false}, {"1.0", 0, false}, {"1e2", 0, false}, {"-", 0, false}, {"", 0, false},
	}
	for _, tt := range ints {
		got, err := ParseInt([]byte(tt.lit))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseInt(%q) = %d, %v; want %d, ok %v", tt.lit, got, err, tt.want, tt.ok)
		}
	}
	uints := []struct {
		lit  string
		want uint64
		ok   bool
	}{
		{"4294967295", 1<<32 - 1, true}, {"4294967296", 0, false}, {"-0", 0, false}, {"18446744073709551616", 0, false},
	}
	for _, tt := range uints {
		got, err := ParseUint([]byte(tt.lit), 32)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseUint(%q, 32) = %d, %v; want %d, ok %v", tt.lit, got, err, tt.want, tt.ok)
		}
	}
	for lit, want := range map[string][2]bool{"true": {true, true}, "false": {false, true}, "null": {false, false}} {
		if v, ok := Bool([]byte(lit)); v != want[0] || ok != want[1] {
			t.Errorf("Bool(%q) = %v, %v", lit, v, ok)
		}
	}
}

// TestZeroAlloc: walking, comparing and decoding into a buffer with room
// allocate nothing.
func TestZeroAlloc(t *testing.T) {
	body := []byte(`{"model":"m","strea\u006d":true,"prompt":"` + strings.Repeat(`hello \"world\" `, 50) + `","max_tokens":16}`)
	buf := make([]byte, 0, len(body))
	n := testing.AllocsPerRun(100, func() {
		for _, mode := range []Mode{Loose, Strict} {
			it := ObjectMembers(body, 0, mode)
			for it.Next() {
				m := it.Member()
				if m.KeyIs(body, "stream") {
					_, _ = Bool(m.Value.Of(body))
				}
				if m.KeyIs(body, "prompt") {
					buf, _ = AppendUnescaped(buf[:0], m.Value.Of(body)[1:m.Value.End-m.Value.Start-1])
				}
				if m.KeyIs(body, "max_tokens") {
					_, _ = ParseInt(m.Value.Of(body))
				}
			}
		}
		_ = Valid(body)
	})
	if n != 0 {
		t.Fatalf("%v allocations per run, want 0", n)
	}
}

// word packs w little-endian, as ScanString loads it.
func word(w [8]byte) uint64 {
	x := uint64(0)
	for i := 7; i >= 0; i-- {
		x = x<<8 | uint64(w[i])
	}
	return x
}

func special(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }

// TestSpecials checks the SWAR test against the byte-wise rule for every
// byte value in every lane.
func TestSpecials(t *testing.T) {
	for lane := 0; lane < 8; lane++ {
		for c := 0; c < 256; c++ {
			var w [8]byte
			for i := range w {
				w[i] = 'a'
			}
			w[lane] = byte(c)
			want := special(byte(c))
			if got := specials(word(w)) != 0; got != want {
				t.Fatalf("specials(byte %#x in lane %d) != 0 is %v, want %v", c, lane, got, want)
			}
		}
	}
}

// TestSpecialsFirst: ScanString jumps to the lowest flagged lane, so it
// must be the first special byte whatever the bytes around it (a borrow
// flags bytes above a special one, never below).
func TestSpecialsFirst(t *testing.T) {
	for lane := 0; lane < 8; lane++ {
		for s := 0; s < 256; s++ {
			if !special(byte(s)) {
				continue
			}
			for c := 0; c < 256; c++ {
				var w [8]byte
				for i := range w {
					switch {
					case i > lane:
						w[i] = byte(c)
					case i < lane && !special(byte(c)):
						w[i] = byte(c)
					case i < lane:
						w[i] = 'a'
					}
				}
				w[lane] = byte(s)
				if got := bits.TrailingZeros64(specials(word(w))) >> 3; got != lane {
					t.Fatalf("first flagged lane of % x is %d, want %d", w, got, lane)
				}
			}
		}
	}
}
