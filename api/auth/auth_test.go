package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	tokRW  = "rw-0123456789abcdef0123456789abcdef"
	tokRO  = "ro-0123456789abcdef0123456789abcdef"
	tokRW2 = "rw2-fedcba9876543210fedcba9876543210"
)

func TestParseTokens(t *testing.T) {
	cases := []struct {
		name, file string
		want       map[string]Kind // token → kind; nil with wantErr
		wantErr    string
	}{
		{"kinds, comments, blank lines", "# ops\n\nrw:" + tokRW + "  # alice\nro:" + tokRO + "\n" + tokRW2 + "\n",
			map[string]Kind{tokRW: ReadWrite, tokRO: ReadOnly, tokRW2: ReadWrite}, ""},
		{"crlf line ends", "rw:" + tokRW + "\r\n", map[string]Kind{tokRW: ReadWrite}, ""},
		{"padding", "ro:" + tokRO + "==\n", map[string]Kind{tokRO + "==": ReadOnly}, ""},
		{"empty", "# nothing\n\n", nil, "no token"},
		{"too short", "rw:changeme\n", nil, "line 1: token shorter than 16"},
		{"unknown kind", "admin:" + tokRW + "\n", nil, "line 1: unknown token kind"},
		{"two tokens on a line", tokRW + " " + tokRO + "\n", nil, "line 1: one token per line"},
		{"quote in token", "\n\"" + tokRW + "\"\n", nil, "line 2: token has a character outside"},
		{"duplicate", tokRW + "\nro:" + tokRW + "\n", nil, "line 2: repeats the token of line 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set, err := ParseTokens([]byte(tc.file))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				for _, tok := range []string{tokRW, tokRO} {
					if strings.Contains(err.Error(), tok) {
						t.Fatalf("error %q leaks a token", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if set.Len() != len(tc.want) {
				t.Fatalf("Len = %d, want %d", set.Len(), len(tc.want))
			}
			for tok, kind := range tc.want {
				if got, ok := set.Lookup(NewToken(tok)); !ok || got != kind {
					t.Errorf("Lookup(%s…) = %v,%v want %v", tok[:4], got, ok, kind)
				}
			}
			for _, bad := range []string{"", tokRW + "x", tokRW[:len(tokRW)-1], "nope"} {
				if _, ok := set.Lookup(NewToken(bad)); ok {
					t.Errorf("Lookup(%q) matched", bad)
				}
			}
		})
	}
}

func TestTokenRedacts(t *testing.T) {
	tok := NewToken(tokRW)
	holder := struct{ T Token }{tok}
	js, _ := json.Marshal(holder)
	for _, s := range []string{
		fmt.Sprint(tok), fmt.Sprintf("%s %v %q %x %#v %+v", tok, tok, tok, tok, tok, holder), string(js), tok.String(),
	} {
		if strings.Contains(s, tokRW) || !strings.Contains(s, redacted) {
			t.Errorf("formatted token %q is not redacted", s)
		}
	}
	if tok.Reveal() != tokRW {
		t.Fatal("Reveal lost the secret")
	}
}

func TestHostPolicy(t *testing.T) {
	cases := []struct {
		listen  string
		allowed []string
		host    string
		want    bool
	}{
		{"127.0.0.1:11111", nil, "127.0.0.1:11111", true},
		{"127.0.0.1:11111", nil, "127.0.0.2", true}, // loopback literal
		{"127.0.0.1:11111", nil, "[::1]:11111", true},
		{"127.0.0.1:11111", nil, "localhost:11111", true},
		{"127.0.0.1:11111", nil, "LOCALHOST.", true},
		{"127.0.0.1:11111", nil, "api.localhost", true},
		{"127.0.0.1:11111", nil, "attacker.example:11111", false},
		{"127.0.0.1:11111", nil, "localhost.attacker.example", false},
		{"127.0.0.1:11111", nil, "10.1.2.3:11111", false}, // not the listen address
		{"127.0.0.1:11111", nil, "", false},
		{"127.0.0.1:11111", []string{"gw.example.com"}, "GW.example.com:11111", true},
		{"127.0.0.1:11111", []string{"*.example.com"}, "a.b.example.com", true},
		{"127.0.0.1:11111", []string{"*.example.com"}, "example.com", false},
		{"127.0.0.1:11111", []string{"*.example.com"}, "evilexample.com", false},
		{"10.0.0.5:11111", nil, "10.0.0.5:11111", true},
		{"10.0.0.5:11111", nil, "10.0.0.6:11111", false},
		{"10.0.0.5:11111", []string{"10.96.0.7"}, "10.96.0.7:11111", true}, // a Service IP
		{"10.0.0.5:11111", []string{"[2001:db8::7]:11111"}, "[2001:db8::7]:80", true},
		{"0.0.0.0:11111", nil, "10.0.0.6:11111", true}, // wildcard: every local address
		{"0.0.0.0:11111", nil, "gw.example.com", false},
		{":11111", nil, "[2001:db8::1]:11111", true},
		{"gw.internal:11111", nil, "gw.internal:11111", true},
	}
	for _, tc := range cases {
		p, err := NewHostPolicy(tc.listen, tc.allowed)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Allowed(tc.host); got != tc.want {
			t.Errorf("listen %s allowed %v: Allowed(%q) = %v, want %v", tc.listen, tc.allowed, tc.host, got, tc.want)
		}
	}
	if _, err := NewHostPolicy("127.0.0.1:1", []string{"a*b.example"}); err == nil {
		t.Error("a*b.example accepted as an allowed host")
	}
}

func TestCheckExposure(t *testing.T) {
	cases := []struct {
		addr     string
		o        Options
		wantErr  bool
		wantWarn bool
	}{
		{"127.0.0.1:11111", Options{}, false, false},
		{"[::1]:11111", Options{}, false, false},
		{"localhost:11111", Options{}, false, false},
		{"0.0.0.0:11111", Options{}, true, false},
		{":11111", Options{}, true, false},
		{"10.0.0.5:11111", Options{}, true, false},
		{"gw.internal:11111", Options{}, true, false},
		{"0.0.0.0:11111", Options{TokenFile: "/x"}, false, false},
		{"0.0.0.0:11111", Options{Insecure: true}, false, true},
	}
	for _, tc := range cases {
		warn, err := CheckExposure(tc.addr, tc.o)
		if (err != nil) != tc.wantErr || (warn != "") != tc.wantWarn {
			t.Errorf("CheckExposure(%s, %+v) = %q, %v", tc.addr, tc.o, warn, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--api-token-file") {
			t.Errorf("refusal %q does not say what to do", err)
		}
	}
}

func writeTokens(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // atomic, as operators should
		t.Fatal(err)
	}
}

func TestGuardCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "rw:"+tokRW+"\nro:"+tokRO+"\n")
	g, err := NewGuard("127.0.0.1:11111", Options{TokenFile: path})
	if err != nil {
		t.Fatal(err)
	}
	open, err := NewGuard("127.0.0.1:11111", Options{})
	if err != nil {
		t.Fatal(err)
	}
	const local = "127.0.0.1:11111"
	cases := []struct {
		name   string
		g      *Guard
		host   string
		authz  string
		need   Access
		status int // 0: allowed
		code   string
		reason string
	}{
		{"probe ignores host and token", g, "attacker.example", "", AccessProbe, 0, "", ""},
		{"public needs a good host", g, "attacker.example", "", AccessPublic, 403, CodeHostNotAllowed, ReasonHostNotAllowed},
		{"public without a token", g, local, "", AccessPublic, 0, "", ""},
		{"read without token", g, local, "", AccessRead, 401, CodeUnauthorized, ReasonMissingToken},
		{"read with basic auth", g, local, "Basic dXNlcjpwYXNz", AccessRead, 401, CodeUnauthorized, ReasonInvalidToken},
		{"read with wrong token", g, local, "Bearer " + tokRW2, AccessRead, 401, CodeUnauthorized, ReasonInvalidToken},
		{"read with ro", g, local, "Bearer " + tokRO, AccessRead, 0, "", ""},
		{"scheme is case-insensitive", g, local, "bearer  " + tokRO, AccessRead, 0, "", ""},
		{"write with ro", g, local, "Bearer " + tokRO, AccessWrite, 403, CodeReadOnlyToken, ReasonReadOnly},
		{"write with rw", g, local, "Bearer " + tokRW, AccessWrite, 0, "", ""},
		{"rw token, foreign host", g, "attacker.example", "Bearer " + tokRW, AccessWrite, 403, CodeHostNotAllowed, ReasonHostNotAllowed},
		{"no token file: write allowed", open, local, "", AccessWrite, 0, "", ""},
		{"no token file: foreign host", open, "attacker.example:11111", "", AccessWrite, 403, CodeHostNotAllowed, ReasonHostNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.g.Check(tc.host, tc.authz, tc.need)
			if tc.status == 0 {
				if d != nil {
					t.Fatalf("refused: %v", d.Err)
				}
				return
			}
			if d == nil {
				t.Fatalf("allowed, want %d %s", tc.status, tc.code)
			}
			if d.Err.Status != tc.status || d.Err.Code != tc.code || d.Reason != tc.reason {
				t.Fatalf("got %d %s %s, want %d %s %s", d.Err.Status, d.Err.Code, d.Reason, tc.status, tc.code, tc.reason)
			}
			if tc.status == http.StatusUnauthorized && !strings.HasPrefix(d.Challenge, "Bearer realm=") {
				t.Fatalf("401 without a Bearer challenge: %q", d.Challenge)
			}
			if strings.Contains(d.Err.Error(), tokRW2) || strings.Contains(d.Err.Error(), tokRO) {
				t.Fatalf("denial %q echoes the token", d.Err)
			}
		})
	}
}

// watcher runs v.Watch until the test ends and returns its SIGHUP channel
// and its events.
func watcher(t *testing.T, v *Verifier, interval time.Duration) (chan<- os.Signal, <-chan ReloadEvent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	events := make(chan ReloadEvent, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		v.Watch(ctx, interval, hup, func(e ReloadEvent) { events <- e })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return hup, events
}

func nextEvent(t *testing.T, events <-chan ReloadEvent, what string) ReloadEvent {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("no reload event after %s", what)
	}
	return ReloadEvent{}
}

// TestVerifierReloadOnFileChange: polling picks up a rotation; a broken
// file keeps the tokens in force and is reported once, not on every poll.
func TestVerifierReloadOnFileChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "rw:"+tokRW+"\n")
	v, err := NewVerifier(path)
	if err != nil {
		t.Fatal(err)
	}
	has := func(tok string) bool { _, ok := v.Lookup(NewToken(tok)); return ok }
	_, events := watcher(t, v, 10*time.Millisecond)

	writeTokens(t, path, "rw:"+tokRW+"\nrw:"+tokRW2+"\n")
	if e := nextEvent(t, events, "adding a token"); e.Err != nil || !e.Changed || e.Trigger != TriggerFileChange || e.Tokens != 2 {
		t.Fatalf("event %+v", e)
	}
	if !has(tokRW) || !has(tokRW2) {
		t.Fatal("both tokens should be valid during rotation")
	}
	writeTokens(t, path, "rw:short\n")
	if e := nextEvent(t, events, "a broken file"); e.Err == nil || e.Tokens != 2 {
		t.Fatalf("event %+v", e)
	}
	if !has(tokRW) || !has(tokRW2) {
		t.Fatal("a broken file must keep the tokens in force")
	}
	writeTokens(t, path, "rw:"+tokRW2+"\n")
	if e := nextEvent(t, events, "dropping the old token"); e.Err != nil || !e.Changed || e.Tokens != 1 {
		t.Fatalf("event %+v (the broken file was reported more than once?)", e)
	}
	if has(tokRW) {
		t.Fatal("rotated-out token still valid")
	}
}

// TestVerifierReloadOnSIGHUP: without polling nothing changes until the
// signal; a missing file on SIGHUP keeps the tokens.
func TestVerifierReloadOnSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, path, "rw:"+tokRW+"\n")
	v, err := NewVerifier(path)
	if err != nil {
		t.Fatal(err)
	}
	has := func(tok string) bool { _, ok := v.Lookup(NewToken(tok)); return ok }
	hup, events := watcher(t, v, 0)

	writeTokens(t, path, "ro:"+tokRW2+"\n")
	if !has(tokRW) || has(tokRW2) {
		t.Fatal("the file was reloaded without a signal")
	}
	hup <- syscall.SIGHUP
	if e := nextEvent(t, events, "SIGHUP"); e.Err != nil || !e.Changed || e.Trigger != TriggerSIGHUP || e.Tokens != 1 {
		t.Fatalf("event %+v", e)
	}
	if has(tokRW) {
		t.Fatal("rotated-out token still valid")
	}
	if k, _ := v.Lookup(NewToken(tokRW2)); k != ReadOnly {
		t.Fatalf("kind = %v, want ro", k)
	}
	hup <- syscall.SIGHUP
	if e := nextEvent(t, events, "SIGHUP, unchanged"); e.Err != nil || e.Changed {
		t.Fatalf("event %+v", e)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	if e := nextEvent(t, events, "missing file"); e.Err == nil || !has(tokRW2) {
		t.Fatalf("event %+v, token kept %v", e, has(tokRW2))
	}
}

func TestReadClientToken(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ name, content, want, wantErr string }{
		{"plain", tokRW + "\n", tokRW, ""},
		{"server line", "# mine\nro:" + tokRO + "  # bob\n", tokRO, ""},
		{"empty", "\n# x\n", "", "holds no token"},
		{"two", tokRW + "\n" + tokRO + "\n", "", "holds 2 tokens"},
	}
	for _, tc := range cases {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadClientToken(p)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v", tc.name, err)
			}
			continue
		}
		if err != nil || got.Reveal() != tc.want {
			t.Errorf("%s: got %v (match %v), %v", tc.name, got, got.Reveal() == tc.want, err)
		}
	}
}

// BenchmarkGuardCheck is the per-request cost of access control on the
// management API: Host check, bearer parse, SHA-256 and a constant-time
// compare against every token (here 4, a rotation in progress on two
// kinds). BenchmarkGuardHostOnly is the no-token-file default.
func BenchmarkGuardCheck(b *testing.B) {
	path := filepath.Join(b.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("rw:"+tokRW+"\nrw:"+tokRW2+"\nro:"+tokRO+"\nro:"+tokRO+"x\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	g, err := NewGuard("127.0.0.1:11111", Options{TokenFile: path})
	if err != nil {
		b.Fatal(err)
	}
	authz := "Bearer " + tokRO
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if d := g.Check("127.0.0.1:11111", authz, AccessRead); d != nil {
			b.Fatal(d.Err)
		}
	}
}

func BenchmarkGuardHostOnly(b *testing.B) {
	g, err := NewGuard("127.0.0.1:11111", Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if d := g.Check("127.0.0.1:11111", "", AccessWrite); d != nil {
			b.Fatal(d.Err)
		}
	}
}
