package datapath

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/tenant"
)

// TestKeyAllowListChecksEveryModelNamed: a key limited to fake-model cannot
// reach another model by naming the allowed one in X-Model and the other in
// the body (plainly or with an escaped field name), nor through a body the
// gateway cannot read.
func TestKeyAllowListChecksEveryModelNamed(t *testing.T) {
	r, keys, _, seen := keyedRule(t)
	limited, err := keys.Create(tenant.KeySpec{TenantID: "t", Name: "limited", AllowedModels: []string{"fake-model"}})
	if err != nil {
		t.Fatal(err)
	}
	open, err := keys.Create(tenant.KeySpec{TenantID: "t", Name: "open"})
	if err != nil {
		t.Fatal(err)
	}
	c := testClient()
	url := ruleURL(r) + "/v1/completions"
	for _, tc := range []struct {
		name, key, xModel, body string
		status                  int
		code                    string
	}{
		{"header allowed, body other", limited.RawKey, "fake-model", `{"model":"secret-model","prompt":"x"}`, 400, CodeModelMismatch},
		{"header allowed, escaped body key", limited.RawKey, "fake-model", `{"mod\u0065l":"secret-model","prompt":"x"}`, 400, CodeModelMismatch},
		{"header other, body allowed", limited.RawKey, "secret-model", `{"model":"fake-model","prompt":"x"}`, 400, CodeModelMismatch},
		{"body other", limited.RawKey, "", `{"model":"secret-model","prompt":"x"}`, 403, tenant.CodeModelNotAllowed},
		{"escaped body key other", limited.RawKey, "", `{"mod\u0065l":"secret-model","prompt":"x"}`, 403, tenant.CodeModelNotAllowed},
		{"header and body agree", limited.RawKey, "fake-model", `{"model":"fake-model","prompt":"x"}`, 200, ""},
		{"header only", limited.RawKey, "fake-model", `{"prompt":"x"}`, 200, ""},
		{"open key, disagreeing", open.RawKey, "fake-model", `{"model":"secret-model","prompt":"x"}`, 400, CodeModelMismatch},
	} {
		before := len(seen())
		hdr := []string{"X-Api-Key", tc.key}
		if tc.xModel != "" {
			hdr = append(hdr, HeaderModel, tc.xModel)
		}
		res := post(t, c, url, tc.body, hdr...)
		if res.status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, res.status, res.body, tc.status)
			continue
		}
		if tc.code == "" {
			continue
		}
		if got := errorCode(t, res.body); got != tc.code {
			t.Errorf("%s: code %s, want %s", tc.name, got, tc.code)
		}
		if after := seen(); len(after) != before {
			t.Errorf("%s: the engine received %q", tc.name, after[before:])
		}
	}

	// Two X-Model lines naming different models: the check would see only
	// the first.
	before := len(seen())
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"fake-model","prompt":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", limited.RawKey)
	req.Header.Add(HeaderModel, "fake-model")
	req.Header.Add(HeaderModel, "secret-model")
	res := do(t, c, req)
	if res.status != 400 || errorCode(t, res.body) != CodeModelMismatch {
		t.Errorf("two X-Model values: %d %s, want 400 %s", res.status, res.body, CodeModelMismatch)
	}
	if after := seen(); len(after) != before {
		t.Errorf("two X-Model values: the engine received %q", after[before:])
	}

	// A multipart body streams through unread: its model cannot be checked.
	mp := func(key string) result {
		body := "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nsecret-model\r\n--b--\r\n"
		req, _ := http.NewRequest(http.MethodPost, ruleURL(r)+"/v1/audio/transcriptions", strings.NewReader(body))
		req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
		req.Header.Set("X-Api-Key", key)
		req.Header.Set(HeaderModel, "fake-model")
		return do(t, c, req)
	}
	if res := mp(limited.RawKey); res.status != 400 || errorCode(t, res.body) != CodeModelUnverifiable {
		t.Errorf("multipart with a limited key: %d %s, want 400 %s", res.status, res.body, CodeModelUnverifiable)
	}
	if res := mp(open.RawKey); res.status == 400 && strings.Contains(res.body, CodeModelUnverifiable) {
		t.Errorf("multipart with an unrestricted key refused: %s", res.body)
	}
}

func TestRequestModel(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	for _, tc := range []struct {
		header string
		body   json.RawMessage
		want   string
		ok     bool
	}{
		{"", nil, "", true},
		{"a", nil, "a", true},
		{"", raw(`"b"`), "b", true},
		{"a", raw(`"a"`), "a", true},
		{"a", raw(`"b"`), "", false},
		{"a", raw(`"\u0062"`), "", false},
		{"a", raw(`7`), "a", true}, // not a string: the engine refuses it
	} {
		got, ok := requestModel(tc.header, tc.body)
		if got != tc.want || ok != tc.ok {
			t.Errorf("requestModel(%q, %s) = %q, %v; want %q, %v", tc.header, tc.body, got, ok, tc.want, tc.ok)
		}
	}
}
