package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/swagger"
)

// FuzzPostRule: whatever the body, POST answers 200, 409 or another 4xx
// with the error envelope, never a 5xx or a panic. Runs its seeds in
// `go test`; `go test -fuzz FuzzPostRule ./api` explores further.
func FuzzPostRule(f *testing.F) {
	for _, ex := range swagger.Examples() {
		f.Add([]byte(ex.Body))
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"serviceArguments":{"externalIP":"::1","port":65536},"endpoints":[]}`))
	f.Add([]byte(`{"serviceArguments":{"externalIP":"10.0.0.1","port":80,"protocol":"tcp","mode":4},"endpoints":[{"endpointIP":"10.1.0.1","targetPort":80,"weight":1,"EP_ROLE":1}]}`))

	rs, err := store.Open(store.Options{Log: quietLog()}) // memory only: fast
	if err != nil {
		f.Fatal(err)
	}
	if err := rs.Replay(context.Background()); err != nil {
		f.Fatal(err)
	}
	h := serve(f, rs, nil)
	handler := h.srv.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, lb, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		handler.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusOK:
		case rec.Code >= 400 && rec.Code < 500:
			var e errBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != rec.Code || e.ErrorCode == "" {
				t.Fatalf("%d with bad envelope %s for body %q", rec.Code, rec.Body, body)
			}
		default:
			t.Fatalf("status %d (%s) for body %q", rec.Code, rec.Body, body)
		}
	})
}
