package tenant

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestRegistry(t *testing.T, dir string) (*Registry, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	opts := DefaultOptions()
	opts.StateDir = dir
	opts.Now = c.now
	r, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, c
}

func ip(n int) *int { return &n }

func mustCreate(t *testing.T, r *Registry, s KeySpec) Created {
	t.Helper()
	c, err := r.Create(s)
	if err != nil {
		t.Fatalf("create %+v: %v", s, err)
	}
	return c
}

func TestKeyLifecycle(t *testing.T) {
	dir := t.TempDir()
	r, c := newTestRegistry(t, dir)
	k := mustCreate(t, r, KeySpec{TenantID: "team-a", Name: "ci", AllowedModels: []string{"llama"}})
	if !strings.HasPrefix(k.RawKey, KeyPrefix+k.KeyID+"_") {
		t.Fatalf("raw key %q does not start with lxb_<id>_", k.RawKey)
	}
	if _, d := r.Admit(Check{Key: k.RawKey, Model: "llama", ClientIP: "127.0.0.1"}); d != nil {
		t.Fatalf("right key refused: %+v", d)
	}
	if _, err := r.Patch(k.KeyID, KeyPatch{Enabled: new(false)}); err != nil {
		t.Fatal(err)
	}
	if _, d := r.Admit(Check{Key: k.RawKey, Model: "llama"}); d == nil || d.Code != CodeKeyDisabled {
		t.Fatalf("disabled key: %+v", d)
	}
	exp := c.now().Add(time.Minute)
	if _, err := r.Patch(k.KeyID, KeyPatch{Enabled: new(true), ExpiresAt: &exp}); err != nil {
		t.Fatal(err)
	}
	if _, d := r.Admit(Check{Key: k.RawKey, Model: "llama"}); d != nil {
		t.Fatalf("enabled key before expiry refused: %+v", d)
	}
	c.add(2 * time.Minute)
	if _, d := r.Admit(Check{Key: k.RawKey, Model: "llama"}); d == nil || d.Code != CodeKeyExpired {
		t.Fatalf("expired key: %+v", d)
	}
	if err := r.Delete(k.KeyID); err != nil {
		t.Fatal(err)
	}
	if _, d := r.Admit(Check{Key: k.RawKey, Model: "llama"}); d == nil || d.Code != CodeInvalidAPIKey {
		t.Fatalf("deleted key: %+v", d)
	}
	if _, err := r.Get(k.KeyID); err == nil {
		t.Fatal("deleted key still listed")
	}
}

func TestAdmitRefusals(t *testing.T) {
	r, _ := newTestRegistry(t, "")
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k", AllowedModels: []string{"llama"}})
	other := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k2"})
	tamper := k.RawKey[:len(k.RawKey)-1] + "x"
	if strings.HasSuffix(k.RawKey, "x") {
		tamper = k.RawKey[:len(k.RawKey)-1] + "y"
	}
	cases := []struct {
		name, key, model, code string
		status                 int
	}{
		{"no key", "", "llama", CodeInvalidAPIKey, http.StatusUnauthorized},
		{"not our format", "sk-abc", "llama", CodeInvalidAPIKey, http.StatusUnauthorized},
		{"unknown id", KeyPrefix + "0123456789abcdef_" + "zzz", "llama", CodeInvalidAPIKey, http.StatusUnauthorized},
		{"wrong secret", tamper, "llama", CodeInvalidAPIKey, http.StatusUnauthorized},
		{"another key's secret", KeyPrefix + k.KeyID + other.RawKey[len(KeyPrefix)+16:], "llama", CodeInvalidAPIKey, http.StatusUnauthorized},
		{"model outside allow-list", k.RawKey, "gpt", CodeModelNotAllowed, http.StatusForbidden},
		{"right key", k.RawKey, "llama", "", 0},
		{"unrestricted key, any model", other.RawKey, "gpt", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, d := r.Admit(Check{Key: tc.key, Model: tc.model, ClientIP: "127.0.0." + fmt.Sprint(len(tc.name))})
			switch {
			case tc.code == "" && d != nil:
				t.Fatalf("refused: %+v", d)
			case tc.code != "" && (d == nil || d.Code != tc.code || d.Status != tc.status):
				t.Fatalf("got %+v, want %d %s", d, tc.status, tc.code)
			}
		})
	}
}

func TestRequestRateLimit(t *testing.T) {
	r, c := newTestRegistry(t, "")
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k", RateLimitRPS: ip(2), BurstSize: ip(3)})
	var ok, refused int
	var last *Denial
	for i := 0; i < 10; i++ {
		if _, d := r.Admit(Check{Key: k.RawKey}); d != nil {
			refused++
			last = d
		} else {
			ok++
		}
	}
	if ok != 3 || refused != 7 {
		t.Fatalf("burst 3 of 10: %d admitted, %d refused", ok, refused)
	}
	if last.Code != CodeRateLimited || last.RetryAfter <= 0 || last.RetryAfter > time.Second {
		t.Fatalf("refusal %+v: want rate_limit_exceeded with Retry-After ≤ 1 s", last)
	}
	h := http.Header{}
	last.WriteHeaders(h)
	if h.Get("Retry-After") != "1" || h.Get("X-Ratelimit-Limit-Requests") != "3" || h.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Fatalf("headers %v", h)
	}
	c.add(time.Second) // 2 refilled
	for i := 0; i < 2; i++ {
		if _, d := r.Admit(Check{Key: k.RawKey}); d != nil {
			t.Fatalf("after refill, request %d refused: %+v", i, d)
		}
	}
	if _, d := r.Admit(Check{Key: k.RawKey}); d == nil {
		t.Fatal("third request after a 1 s refill of 2 admitted")
	}
}

func TestTokenReservationBoundsOvershoot(t *testing.T) {
	r, _ := newTestRegistry(t, "")
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k", TokensPerMin: ip(1000)})
	// A burst of concurrent long requests: each reserves 400 before any
	// finishes. Only as many pass as the budget covers plus one overrun.
	var adm []Admission
	for i := 0; i < 10; i++ {
		if a, d := r.Admit(Check{Key: k.RawKey, Estimate: 400}); d == nil {
			adm = append(adm, a)
		} else if d.Code != CodeTokensExhausted {
			t.Fatalf("refusal code %s", d.Code)
		}
	}
	if len(adm) != 3 { // 1000 → 600 → 200 → -200: the third overruns by < one reservation
		t.Fatalf("%d of 10 admitted, want 3", len(adm))
	}
	// They really used 100 each: 900 comes back.
	for i := range adm {
		adm[i].Settle(60, 40, true)
	}
	if _, d := r.Admit(Check{Key: k.RawKey, Estimate: 400}); d != nil {
		t.Fatalf("after settling, refused: %+v", d)
	}
	u, _ := r.KeyUsage(k.KeyID)
	if u.PromptTokens != 180 || u.CompletionTokens != 120 || u.Requests != 4 || u.Rejected != 7 {
		t.Fatalf("usage %+v", u)
	}
}

func TestTenantCeilingOverKeys(t *testing.T) {
	r, _ := newTestRegistry(t, "")
	a := mustCreate(t, r, KeySpec{TenantID: "t", Name: "a"})
	b := mustCreate(t, r, KeySpec{TenantID: "t", Name: "b"})
	if _, err := r.SetTenantLimit(TenantLimit{TenantID: "t", RPS: ip(3)}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; i < 6; i++ {
		key := a.RawKey
		if i%2 == 1 {
			key = b.RawKey
		}
		if _, d := r.Admit(Check{Key: key}); d == nil {
			n++
		} else if d.Message != "tenant request rate limit reached" {
			t.Fatalf("refusal %+v", d)
		}
	}
	if n != 3 {
		t.Fatalf("tenant ceiling 3 over two keys admitted %d", n)
	}
}

func TestRefusalTakesNothing(t *testing.T) {
	r, _ := newTestRegistry(t, "")
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k", RateLimitRPS: ip(5), TokensPerMin: ip(100)})
	a, d := r.Admit(Check{Key: k.RawKey, Estimate: 150}) // 100 → -50
	if d != nil {
		t.Fatal(d)
	}
	for i := 0; i < 3; i++ { // token refusals must give back the request slot
		if _, d := r.Admit(Check{Key: k.RawKey, Estimate: 10}); d == nil || d.Code != CodeTokensExhausted {
			t.Fatalf("want token refusal, got %+v", d)
		}
	}
	a.Settle(5, 5, true) // 140 back: level 90
	for i := 0; i < 4; i++ {
		if _, d := r.Admit(Check{Key: k.RawKey, Estimate: 10}); d != nil {
			t.Fatalf("request %d after settle refused (%s): refusals spent request slots", i, d.Code)
		}
	}
}

func TestAuthFailureFloodIsLimitedPerIP(t *testing.T) {
	r, _ := newTestRegistry(t, "")
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k"})
	limited := 0
	for i := 0; i < 100; i++ {
		if _, d := r.Admit(Check{Key: "lxb_0000000000000000_guess", ClientIP: "127.0.0.9"}); d.Code == CodeAuthRateLimited {
			limited++
		}
	}
	if limited < 70 {
		t.Fatalf("only %d of 100 failed checks from one address were rate limited", limited)
	}
	if _, d := r.Admit(Check{Key: k.RawKey, ClientIP: "127.0.0.10"}); d != nil {
		t.Fatalf("another address is refused too: %+v", d)
	}
}

func TestPersistenceKeepsHashesOnly(t *testing.T) {
	dir := t.TempDir()
	r, _ := newTestRegistry(t, dir)
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k", RateLimitRPS: ip(5)})
	if _, err := r.SetTenantLimit(TenantLimit{TenantID: "t", TokensPerMin: ip(500)}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fileName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), k.RawKey[len(KeyPrefix)+17:]) {
		t.Fatal("the key's secret is in the state file")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v, want 0600", st.Mode().Perm())
	}
	r2, _ := newTestRegistry(t, dir)
	if _, d := r2.Admit(Check{Key: k.RawKey}); d != nil {
		t.Fatalf("key refused after restart: %+v", d)
	}
	if got := r2.TenantLimits("t"); len(got) != 1 || *got[0].TokensPerMin != 500 {
		t.Fatalf("tenant limit after restart: %+v", got)
	}
	v, _ := r2.Get(k.KeyID)
	if v.RateLimitRPS != 5 || v.BurstSize != 5 {
		t.Fatalf("limits after restart: %+v", v)
	}
}

func TestViewsNeverShowKeyMaterial(t *testing.T) {
	r, _ := newTestRegistry(t, "")
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k"})
	b, _ := json.Marshal(r.List(""))
	secret := k.RawKey[len(KeyPrefix)+17:]
	if strings.Contains(string(b), secret) || strings.Contains(string(b), "sha256$") {
		t.Fatalf("list shows key material: %s", b)
	}
	s := Secret{k.RawKey}
	if fmt.Sprint(s) != "[redacted]" || fmt.Sprintf("%#v", s) == k.RawKey {
		t.Fatal("Secret prints itself")
	}
	if b, _ := json.Marshal(s); string(b) != `"[redacted]"` {
		t.Fatalf("Secret JSON %s", b)
	}
}

func TestValidation(t *testing.T) {
	r, _ := newTestRegistry(t, "")
	mustCreate(t, r, KeySpec{TenantID: "t", Name: "taken"})
	cases := []struct {
		name  string
		spec  KeySpec
		code  string
		field string
	}{
		{"no tenant", KeySpec{Name: "n"}, apierror.CodeInvalidField, FieldTenantID},
		{"no name", KeySpec{TenantID: "t"}, apierror.CodeInvalidField, FieldName},
		{"control char in tenant", KeySpec{TenantID: "t\x01", Name: "n"}, apierror.CodeInvalidField, FieldTenantID},
		{"newline in name", KeySpec{TenantID: "t", Name: "a\nb"}, apierror.CodeInvalidField, FieldName},
		{"zero rps", KeySpec{TenantID: "t", Name: "n", RateLimitRPS: ip(0)}, apierror.CodeInvalidField, FieldRateLimitRPS},
		{"negative tpm", KeySpec{TenantID: "t", Name: "n", TokensPerMin: ip(-1)}, apierror.CodeInvalidField, FieldTokensPerMin},
		{"burst below rps", KeySpec{TenantID: "t", Name: "n", RateLimitRPS: ip(10), BurstSize: ip(5)}, apierror.CodeInvalidCombo, FieldBurstSize},
		{"burst without rps", KeySpec{TenantID: "t", Name: "n", BurstSize: ip(5)}, apierror.CodeInvalidCombo, FieldBurstSize},
		{"duplicate model", KeySpec{TenantID: "t", Name: "n", AllowedModels: []string{"a", "a"}}, apierror.CodeInvalidField, "allowed_models[1]"},
		{"duplicate name in tenant", KeySpec{TenantID: "t", Name: "taken"}, CodeDuplicateName, FieldName},
		{"hash without id", KeySpec{TenantID: "t", Name: "n", KeyHash: "sha256$00$00"}, apierror.CodeInvalidCombo, FieldKeyHash},
		{"bad hash", KeySpec{TenantID: "t", Name: "n", KeyID: "0123456789abcdef", KeyHash: "md5$x"}, apierror.CodeInvalidField, FieldKeyHash},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Create(tc.spec)
			e, ok := apierror.As(err)
			if !ok || e.Status != http.StatusBadRequest || e.Code != tc.code || e.Field != tc.field {
				t.Fatalf("got %v, want 400 %s at %s", err, tc.code, tc.field)
			}
		})
	}
	if n := len(r.List("")); n != 1 {
		t.Fatalf("%d keys after rejected creates, want 1", n)
	}
}

func TestImportMintedHash(t *testing.T) {
	r, _ := newTestRegistry(t, "")
	m, err := Mint()
	if err != nil {
		t.Fatal(err)
	}
	c := mustCreate(t, r, KeySpec{TenantID: "t", Name: "gitops", KeyID: m.ID, KeyHash: m.Hash.String()})
	if c.RawKey != "" {
		t.Fatal("an imported key's create shows a raw key")
	}
	if _, d := r.Admit(Check{Key: m.Raw.Reveal()}); d != nil {
		t.Fatalf("imported key refused: %+v", d)
	}
}

func TestConcurrentAdmitAndPatch(t *testing.T) {
	r, _ := newTestRegistry(t, "")
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k", RateLimitRPS: ip(1000), TokensPerMin: ip(1 << 20)})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if a, d := r.Admit(Check{Key: k.RawKey, Estimate: 10}); d == nil {
					a.Settle(3, 3, true)
				}
			}
		}()
	}
	for i := 0; i < 50; i++ {
		if _, err := r.Patch(k.KeyID, KeyPatch{RateLimitRPS: ip(1000 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	// Every Admit was counted once and the last PATCH is what stands.
	u, _ := r.KeyUsage(k.KeyID)
	v, _ := r.Get(k.KeyID)
	if u.Requests+u.Rejected != 2000 || u.CompletionTokens != 3*u.Requests || v.RateLimitRPS != 1049 {
		t.Fatalf("after concurrent admits and patches: usage %+v, key %+v", u, v)
	}
}

func BenchmarkAdmitHit(b *testing.B) {
	opts := DefaultOptions()
	r, _ := Open(opts)
	k, _ := r.Create(KeySpec{TenantID: "t", Name: "k", AllowedModels: []string{"llama"}, RateLimitRPS: ip(1 << 29), BurstSize: ip(1 << 30), TokensPerMin: ip(1 << 30)})
	if _, err := r.SetTenantLimit(TenantLimit{TenantID: "t", RPS: ip(1 << 30), TokensPerMin: ip(1 << 30)}); err != nil {
		b.Fatal(err)
	}
	c := Check{Key: k.RawKey, Model: "llama", ClientIP: "127.0.0.1", Estimate: 100}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a, d := r.Admit(c)
		if d != nil {
			b.Fatal(d.Code)
		}
		a.Settle(50, 50, true)
	}
}

// BenchmarkAdmitBaseline is the floor Admit is compared with in the same
// run: one SHA-256 of a key-sized input (the check's unavoidable cost).
func BenchmarkAdmitBaseline(b *testing.B) {
	m, _ := Mint()
	secret := m.Raw.Reveal()[len(KeyPrefix)+17:]
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !m.Hash.matches(secret) {
			b.Fatal("no match")
		}
	}
}

// TestLimiterAccuracyUnderOverload drives keys at 10× their limits on a
// simulated clock (arrivals evenly spaced) and checks what was admitted:
// requests within one of rps × duration + burst; tokens within one
// request's reservation of tpm × minutes + the first minute's bucket.
func TestLimiterAccuracyUnderOverload(t *testing.T) {
	r, c := newTestRegistry(t, "")
	const rps, burst, seconds = 50, 100, 20
	k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "rps", RateLimitRPS: ip(rps), BurstSize: ip(burst)})
	admitted := 0
	step := time.Second / (10 * rps)
	for i := 0; i < 10*rps*seconds; i++ {
		if _, d := r.Admit(Check{Key: k.RawKey}); d == nil {
			admitted++
		}
		c.add(step)
	}
	want := rps*seconds + burst
	if admitted < want-1 || admitted > want+1 {
		t.Fatalf("requests at 10× overload: admitted %d, want %d±1", admitted, want)
	}
	t.Logf("requests: admitted %d of %d sent, limit allows %d", admitted, 10*rps*seconds, want)

	const tpm, est, minutes = 6000, 100, 3
	k2 := mustCreate(t, r, KeySpec{TenantID: "t", Name: "tpm", TokensPerMin: ip(tpm)})
	tokens := 0
	per := time.Minute / (10 * tpm / est)
	for i := 0; i < 10*tpm/est*minutes; i++ {
		if a, d := r.Admit(Check{Key: k2.RawKey, Estimate: est}); d == nil {
			a.Settle(est/2, est/2, true)
			tokens += est
		}
		c.add(per)
	}
	limit := tpm*minutes + tpm
	if tokens > limit+est || tokens < limit-2*est {
		t.Fatalf("tokens at 10× overload: charged %d, limit %d (+%d)", tokens, limit, est)
	}
	t.Logf("tokens: charged %d, limit allows %d", tokens, limit)
}

// TestUsageFoundAfterLongStream: the usage event at the end of a stream far
// longer than the kept tail is still found, in small and large writes.
func TestUsageFoundAfterLongStream(t *testing.T) {
	for _, chunk := range []int{7, 300, 20000} {
		rec := httptest.NewRecorder()
		uw := NewUsageWriter(rec, false)
		filler := []byte(strings.Repeat("data: {\"choices\":[{\"text\":\"x\"}]}\n\n", 2000))
		for i := 0; i < len(filler); i += chunk {
			_, _ = uw.Write(filler[i:min(i+chunk, len(filler))])
		}
		_, _ = uw.Write([]byte(`data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34}}` + "\n\ndata: [DONE]\n\n"))
		p, c, ok := uw.Usage()
		if !ok || p != 12 || c != 34 {
			t.Fatalf("chunk %d: usage %d %d %v", chunk, p, c, ok)
		}
		if rec.Body.Len() != len(filler)+len(`data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34}}`)+len("\n\ndata: [DONE]\n\n") {
			t.Fatalf("chunk %d: client got %d bytes", chunk, rec.Body.Len())
		}
	}
}

// TestAuthFailuresNeverLockOutAValidKey: failures from one source are
// limited, a valid key from that same source is still admitted.
func TestAuthFailuresNeverLockOutAValidKey(t *testing.T) {
	for _, src := range []string{"127.0.0.9", "2001:db8:1:2::9"} {
		r, _ := newTestRegistry(t, "")
		k := mustCreate(t, r, KeySpec{TenantID: "t", Name: "k"})
		limited := 0
		for range 100 {
			if _, d := r.Admit(Check{Key: "lxb_0000000000000000_guess", ClientIP: src}); d.Code == CodeAuthRateLimited {
				limited++
			}
		}
		if limited < 70 {
			t.Fatalf("%s: only %d of 100 failed checks were rate limited", src, limited)
		}
		if _, d := r.Admit(Check{Key: k.RawKey, ClientIP: src}); d != nil {
			t.Fatalf("%s: a valid key from the failing address is refused: %+v", src, d)
		}
	}
}

func TestFailureSourceAggregatesIPv6By64(t *testing.T) {
	cases := []struct{ ip, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2::9", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"not an ip", "not an ip"},
	}
	for _, tc := range cases {
		if got := failureSource(tc.ip); got != tc.want {
			t.Errorf("failureSource(%q) = %q, want %q", tc.ip, got, tc.want)
		}
	}
	r, _ := newTestRegistry(t, "")
	limited := 0
	for i := range 100 { // a client walking its /64 is one source
		ip := "2001:db8:1:2::" + strconv.FormatInt(int64(i+1), 16)
		if _, d := r.Admit(Check{Key: "lxb_0000000000000000_guess", ClientIP: ip}); d.Code == CodeAuthRateLimited {
			limited++
		}
	}
	if limited < 70 {
		t.Fatalf("only %d of 100 failures across one /64 were rate limited", limited)
	}
}

func TestOpenRemovesTemporaryFilesACrashLeft(t *testing.T) {
	dir := t.TempDir()
	leftover := filepath.Join(dir, ".apikeys.json.tmp-4242")
	if err := os.WriteFile(leftover, []byte(`{"keys":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{StateDir: dir}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("leftover %s still there after boot: %v", leftover, err)
	}
}
