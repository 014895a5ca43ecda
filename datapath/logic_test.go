package datapath

import (
	"encoding/json"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/spec"
)

func TestRouteMatchMostSpecific(t *testing.T) {
	mk := func(name string, f func(*spec.Key)) *ruleState {
		k := spec.Key{VIP: netip.MustParseAddr("127.0.0.1"), Port: 80, Protocol: "tcp", Host: "", PathPrefix: ""}
		f(&k)
		k.Protocol = name // tag so the test can tell rules apart
		return &ruleState{key: k}
	}
	table := newRouteTable([]*ruleState{
		mk("catch-all", func(*spec.Key) {}),
		mk("prefix-v1", func(k *spec.Key) { k.PathPrefix, k.PathMatchMode = "/v1/", pathMatchPrefix }),
		mk("prefix-chat", func(k *spec.Key) { k.PathPrefix, k.PathMatchMode = "/v1/chat/", pathMatchPrefix }),
		mk("exact-models", func(k *spec.Key) { k.PathPrefix, k.PathMatchMode = "/v1/models", pathMatchExact }),
		mk("host", func(k *spec.Key) { k.Host = "a.example" }),
		mk("model", func(k *spec.Key) { k.ModelName = "llama" }),
	})
	tests := []struct{ host, path, model, want string }{
		{"x", "/other", "", "catch-all"},
		{"x", "/v1/completions", "", "prefix-v1"},
		{"x", "/v1/chat/completions", "", "prefix-chat"},
		{"x", "/v1/models", "", "exact-models"},
		{"x", "/v1/models/abc", "", "prefix-v1"},
		{"A.EXAMPLE", "/v1/chat/completions", "", "host"},
		{"a.example", "/v1/completions", "llama", "model"},
		{"x", "/v1/completions", "qwen", "prefix-v1"},
	}
	if !table.needsModel {
		t.Fatal("needsModel false with a model-pinned rule")
	}
	for _, tc := range tests {
		got := table.match(tc.host, tc.path, tc.model)
		if got == nil || got.key.Protocol != tc.want {
			t.Errorf("match(%q,%q,%q) = %v, want %s", tc.host, tc.path, tc.model, got, tc.want)
		}
	}
}

// TestRouteHostKeyed: route cuts the Host's port only when a rule pins a
// host; a table without one matches whatever the Host says.
func TestRouteHostKeyed(t *testing.T) {
	mk := func(name, host string) *ruleState {
		return &ruleState{key: spec.Key{Protocol: name, Host: host}}
	}
	pinned := newRouteTable([]*ruleState{mk("any", ""), mk("pinned", "a.example")})
	open := newRouteTable([]*ruleState{mk("any", "")})
	tests := []struct {
		table      *routeTable
		host, want string
	}{
		{pinned, "a.example:8080", "pinned"},
		{pinned, "A.EXAMPLE", "pinned"},
		{pinned, "[::1]:80", "any"},
		{pinned, "b.example:8080", "any"},
		{open, "a.example:8080", "any"},
		{open, "", "any"},
	}
	for _, tc := range tests {
		got := tc.table.route(tc.host, "/v1/completions", "")
		if got == nil || got.key.Protocol != tc.want {
			t.Errorf("route(%q) = %v, want %s", tc.host, got, tc.want)
		}
	}
}

func TestSessionKey(t *testing.T) {
	tests := []struct {
		name   string
		source spec.SessionSource
		key    string
		setup  func(*http.Request)
		want   string
	}{
		{"header", spec.SessionFromHeader, "x-user", func(r *http.Request) { r.Header.Set("X-User", "alice") }, "alice"},
		{"header missing", spec.SessionFromHeader, "x-user", func(*http.Request) {}, ""},
		{"cookie", spec.SessionFromCookie, "sid", func(r *http.Request) { r.Header.Set("Cookie", "a=1; sid=s-42") }, "s-42"},
		{"query", spec.SessionFromQuery, "user", func(r *http.Request) { r.URL, _ = url.Parse("/v1/completions?user=bob") }, "bob"},
		{"source ip", spec.SessionFromSourceIP, "", func(*http.Request) {}, "10.1.2.3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := testCompiled(t, spec.SelPersist, []int{1}, nil)
			c.rule.Session = spec.SessionKey{Source: tc.source, Name: tc.key}
			if tc.source == spec.SessionFromHeader {
				c.sessionHeader = http.CanonicalHeaderKey(tc.key)
			}
			r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
			tc.setup(r)
			if got := c.sessionKey(r, "10.1.2.3"); got != tc.want {
				t.Fatalf("sessionKey = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPrepareOutboundHeader(t *testing.T) {
	for _, tc := range []struct {
		trust  bool
		client string
		xff    string // "": none forwarded
	}{
		{true, "127.0.0.9", "1.2.3.4, 127.0.0.9"},
		{false, "127.0.0.9", "127.0.0.9"}, // the client's own claim is dropped
		{true, "", "1.2.3.4"},             // no address known: the trusted claim passes as sent
		{false, "", ""},                   // and an untrusted one is dropped
	} {
		h := http.Header{}
		h.Set("Connection", "keep-alive, X-Secret")
		h.Set("X-Secret", "s")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Te", "trailers")
		h.Set("Expect", "100-continue")
		h.Set("Authorization", "Bearer k")
		h.Add("X-Forwarded-For", "1.2.3.4")
		prepareOutboundHeader(h, tc.client, tc.trust)
		for _, k := range []string{"Connection", "X-Secret", "Keep-Alive", "Te", "Expect"} {
			if _, ok := h[k]; ok {
				t.Errorf("%s forwarded", k)
			}
		}
		if h.Get("Authorization") != "Bearer k" {
			t.Error("end-to-end header dropped")
		}
		if got := h.Values("X-Forwarded-For"); tc.xff == "" && len(got) != 0 || tc.xff != "" && (len(got) != 1 || got[0] != tc.xff) {
			t.Errorf("trust %v, client %q: X-Forwarded-For = %q, want %q", tc.trust, tc.client, got, tc.xff)
		}
	}
}

func TestAddressHelpers(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:5555": "127.0.0.1", "[::1]:80": "::1", "noport": "noport",
		"[fe80::1%eth0]:80": "fe80::1%eth0", "[[::1]]:80": "::1", "[::1:80": "::1", "]:1": "", ":80": "",
	} {
		if want != strings.Trim(in[:max(strings.LastIndexByte(in, ':'), 0)], "[]") && strings.Contains(in, ":") {
			t.Fatalf("case %q: want %q is not what strings.Trim gives", in, want)
		}
		if got := clientIP(in); got != want {
			t.Errorf("clientIP(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"api.example:8080": "api.example", "api.example": "api.example", "[::1]:80": "::1", "[::1]": "::1",
	} {
		if got := hostOnly(in); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHostOnlyFastPath holds hostOnly's bracket-free shortcut to what
// net.SplitHostPort and the trims make of the same Host (the route match
// keys on it).
func TestHostOnlyFastPath(t *testing.T) {
	reference := func(h string) string {
		if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
			if host, _, err := net.SplitHostPort(h); err == nil {
				return strings.Trim(host, "[]")
			}
		}
		return strings.Trim(h, "[]")
	}
	for _, in := range []string{
		"", ":", "::", ":80", "a:", "a:b:c", "::1", "fe80::1:80", "host", "host:8080", "127.0.4.1:34000",
		"10.0.0.1", "[::1]:80", "[::1]", "[::1", "::1]", "[a]:b:c", "a]:80", "[a:80", "x:y]", "[[::1]]:80", "]:1",
	} {
		if got, want := hostOnly(in), reference(in); got != want {
			t.Errorf("hostOnly(%q) = %q, want %q", in, got, want)
		}
	}
	// The word walk (hostMarks): two marks at every pair of places of
	// hosts around the word size, in the words' every alignment.
	marks := []byte{':', '[', ']', 'Y', '_', 'a'}
	for n := 1; n <= 17; n++ {
		for i := range n {
			for j := i; j < n; j++ {
				for _, a := range marks {
					for _, b := range marks {
						h := []byte(strings.Repeat("1", n))
						h[i], h[j] = a, b
						if got, want := hostOnly(string(h)), reference(string(h)); got != want {
							t.Fatalf("hostOnly(%q) = %q, want %q", h, got, want)
						}
					}
				}
			}
		}
	}
}

func TestRequestIDFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		id := newRequestID()
		if !hex32.MatchString(id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	if strings.ToLower(newRequestID()) == "" {
		t.Fatal("empty id")
	}
}

// TestRequestIDOf: the word-at-a-time spelling is a plain digit-by-digit
// one (each word's low nibbles by byte, then its high nibbles), for chosen
// edges and many random pairs; and each of the 128 bits moves exactly one
// digit, so distinct bits give distinct ids.
func TestRequestIDOf(t *testing.T) {
	const digits = "0123456789abcdef"
	reference := func(a, b uint64) string {
		var s []byte
		for _, w := range []uint64{a, b} {
			for _, shift := range []uint{0, 4} {
				for k := range uint(8) {
					s = append(s, digits[w>>(8*k+shift)&0xf])
				}
			}
		}
		return string(s)
	}
	tests := [][2]uint64{
		{0, 0},
		{^uint64(0), ^uint64(0)},
		{0x0123456789abcdef, 0xfedcba9876543210},
		{0x0909090909090909, 0x0a0a0a0a0a0a0a0a}, // the 9/a edge in every byte
		{0x9a9a9a9a9a9a9a9a, 0xa9a9a9a9a9a9a9a9},
		{0xf0f0f0f0f0f0f0f0, 0x0f0f0f0f0f0f0f0f},
	}
	for range 100000 {
		tests = append(tests, [2]uint64{rand.Uint64(), rand.Uint64()})
	}
	for _, tc := range tests {
		if got, want := requestIDOf(tc[0], tc[1]), reference(tc[0], tc[1]); got != want {
			t.Fatalf("requestIDOf(%#x, %#x) = %s, want %s", tc[0], tc[1], got, want)
		}
	}
	zero := requestIDOf(0, 0)
	moved := map[int]int{} // digit position -> bits that moved it
	for bit := range 128 {
		var w [2]uint64
		w[bit/64] = 1 << (bit % 64)
		id := requestIDOf(w[0], w[1])
		diff := -1
		for i := range id {
			if id[i] != zero[i] {
				if diff >= 0 {
					t.Fatalf("bit %d moved digits %d and %d", bit, diff, i)
				}
				diff = i
			}
		}
		if diff < 0 {
			t.Fatalf("bit %d moved no digit", bit)
		}
		moved[diff]++
	}
	for i := range requestIDLen {
		if moved[i] != 4 {
			t.Errorf("digit %d spells %d bits, want 4", i, moved[i])
		}
	}
}

// TestMintIDs: a batch is n ids back to back, each well formed, none
// repeated within or across batches.
func TestMintIDs(t *testing.T) {
	seen := map[string]bool{}
	var m idMint
	for range 5 * idBatch {
		id := m.next()
		if !hex32.MatchString(id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	if b := mintIDs(3); len(b) != 3*requestIDLen {
		t.Fatalf("mintIDs(3) is %d bytes", len(b))
	}
}

func TestBodyModel(t *testing.T) {
	tests := []struct {
		body, want string
		err        bool
	}{
		{`{"model":"llama","prompt":"x"}`, "llama", false},
		{`{"prompt":"x"}`, "", false},
		{`{"model":7}`, "", false},
		{`{"model":"a\u00e9"}`, "aé", false},
		{`{"model":`, "", true},
		{`[1,2]`, "", true},
	}
	for _, tc := range tests {
		got, err := bodyModel([]byte(tc.body))
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("bodyModel(%s) = %q, %v", tc.body, got, err)
		}
	}
}

func TestRequestIdentity(t *testing.T) {
	tests := []struct {
		model, conv, body      string
		wantModel, wantSession string
	}{
		{"", "", `{"model":"m","user":"u","prompt":"p"}`, "m", "u"},
		{"hm", "hc", `{"model":"m","user":"u"}`, "hm", "hc"},
		{"hm", "", `{"model":"m","user":"u"}`, "hm", "u"},
		{"", "hc", `{"model":"m","user":"u"}`, "m", "hc"},
		{"", "", `{"model":7,"user":null}`, "", ""},
		{"", "", `{"user":"a\u00e9"}`, "", "aé"},
		{"", "", `{"a":{"model":"inner"}}`, "", ""},
		{"", "", `{"model":"m"`, "", ""},
		{"", "hc", ``, "", "hc"},
	}
	for _, tc := range tests {
		h := http.Header{}
		if tc.model != "" {
			h.Set(HeaderModel, tc.model)
		}
		if tc.conv != "" {
			h.Set(headerConversationID, tc.conv)
		}
		m, s := requestIdentity(h, ladder.ScanBody([]byte(tc.body)))
		if m != tc.wantModel || s != tc.wantSession {
			t.Errorf("requestIdentity(%q, %q, %s) = %q, %q; want %q, %q", tc.model, tc.conv, tc.body, m, s, tc.wantModel, tc.wantSession)
		}
	}
}

// FuzzBodyModel checks the routing decoder against a full encoding/json
// decode: same model for every valid object, an error for invalid JSON.
func FuzzBodyModel(f *testing.F) {
	for _, s := range []string{`{"model":"m"}`, `{"model":1}`, `{}`, `{"model":"\u00e9","x":[1,{"model":"no"}]}`, `{`, `null`, `"s"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := bodyModel(body)
		var full map[string]any
		ferr := json.Unmarshal(body, &full)
		if (err != nil) != (ferr != nil) {
			t.Fatalf("bodyModel err %v, json err %v for %q", err, ferr, body)
		}
		if err != nil {
			return
		}
		want, _ := full["model"].(string)
		if got != want {
			t.Fatalf("bodyModel = %q, want %q for %q", got, want, body)
		}
	})
}
