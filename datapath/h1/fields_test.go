package h1

import (
	"net/http"
	"testing"
)

// TestFieldsLacks: Fields.Lacks says a name is absent only when the
// parsed header map holds no such key; it may say "cannot tell" for a
// name that is absent (an uncommon name, a shared filter bit), never
// "absent" for one that is there.
func TestFieldsLacks(t *testing.T) {
	const post = "POST / HTTP/1.1\r\nHost: x\r\n"
	tests := []struct {
		name, fields, ask string
		want              bool
	}{
		{"absent", "Content-Type: application/json\r\nContent-Length: 0\r\n", "X-Request-Id", true},
		{"absent model", "Content-Type: application/json\r\n", "X-Model", true},
		{"absent upgrade", "Accept: */*\r\n", "Upgrade", true},
		{"present", "X-Request-Id: r\r\n", "X-Request-Id", false},
		{"present lower case", "x-request-id: r\r\n", "X-Request-Id", false},
		{"present odd case", "X-MoDeL: m\r\n", "X-Model", false},
		{"present twice", "X-Model: a\r\nX-Model: b\r\n", "X-Model", false},
		{"present after many", "A: 1\r\nB: 2\r\nC: 3\r\nUpgrade: h2c\r\nConnection: upgrade\r\n", "Upgrade", false},
		{"uncommon name", "", "X-Custom", false},
		{"uncommon name present", "X-Custom: 1\r\n", "X-Custom", false},
		{"Host is no field of the map", "", "Host", true},
		{"shares a filter bit (Origin, slot 48)", "Origin: o\r\n", "X-Request-Id", false},
		{"empty name", "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, p, err := parseRaw(post + tc.fields + "\r\n")
			if err != nil {
				t.Fatal(err)
			}
			f := Fields{stored: p.stored, known: true}
			if got := f.Lacks(FieldOf(tc.ask)); got != tc.want {
				t.Fatalf("Lacks(%q) = %v, want %v (header %v)", tc.ask, got, tc.want, r.Header)
			}
			if f.Lacks(FieldOf(tc.ask)) && r.Header[tc.ask] != nil {
				t.Fatalf("Lacks(%q), yet the header holds it: %v", tc.ask, r.Header)
			}
			if (Fields{}).Lacks(FieldOf(tc.ask)) {
				t.Fatalf("the zero Fields lacks %q", tc.ask)
			}
		})
	}
}

// TestResponseFields: the ResponseWriter reports its request state's
// filter, and the zero Fields without one.
func TestResponseFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		rs   *reqState
		want bool // Lacks("X-Model")
	}{
		{"no state", nil, false},
		{"nothing stored", &reqState{}, true},
		{"X-Model stored", &reqState{fields: func() fieldFilter {
			var s internSet
			_, slot, _ := internKey("X-Model")
			s.add(slot)
			return s.filter()
		}()}, false},
	} {
		var rw http.ResponseWriter = &response{rs: tc.rs}
		f, ok := rw.(interface{ Fields() Fields })
		if !ok || f.Fields().Lacks(FieldOf("X-Model")) != tc.want {
			t.Errorf("%s: Fields().Lacks(X-Model) = %v, want %v", tc.name, ok && f.Fields().Lacks(FieldOf("X-Model")), tc.want)
		}
	}
}

// TestFieldOf: every common name has a Field, and only those do.
func TestFieldOf(t *testing.T) {
	for _, k := range commonRequestHeaders {
		if FieldOf(k) == 0 {
			t.Errorf("FieldOf(%q) = 0", k)
		}
	}
	for _, k := range []string{"", "X-Custom", "X-Request-Ids", "Hosts", "A"} {
		if FieldOf(k) != 0 {
			t.Errorf("FieldOf(%q) = %#x, want 0", k, FieldOf(k))
		}
	}
}
