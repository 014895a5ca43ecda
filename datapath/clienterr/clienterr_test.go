package clienterr

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestWriteShape(t *testing.T) {
	w := httptest.NewRecorder()
	Write(w, http.StatusServiceUnavailable, "no_healthy_backend", "all \"down\"\n")
	var v struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("not JSON: %v %q", err, w.Body.String())
	}
	if w.Code != 503 || v.Error.Code != "no_healthy_backend" || v.Error.Type != "service_unavailable_error" ||
		v.Error.Message != "all \"down\"\n" || w.Header().Get(Header) != "no_healthy_backend" ||
		w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %+v headers %v", w.Code, v, w.Header())
	}
	if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(w.Body.Len()) {
		t.Fatalf("Content-Length %s for %d body bytes", cl, w.Body.Len())
	}
}

// TestType: one status, one error type, on every path that answers it
// (the single-pool proxy and the P/D dialects alike).
func TestType(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
	}{
		{400, "invalid_request_error"},
		{401, "invalid_request_error"},
		{404, "invalid_request_error"},
		{413, "invalid_request_error"},
		{429, "rate_limit_error"},
		{500, "server_error"},
		{501, "server_error"},
		{502, "server_error"},
		{503, "service_unavailable_error"},
		{504, "server_error"},
	} {
		if got := Type(tc.status); got != tc.want {
			t.Errorf("Type(%d) = %q, want %q", tc.status, got, tc.want)
		}
	}
}

// TestAppend pins the bytes of the object: SSE error events embed it.
func TestAppend(t *testing.T) {
	got := string(Append(nil, 502, "pd_decode_backend_died", "decode backend died mid-stream"))
	want := `{"error":{"message":"decode backend died mid-stream","type":"server_error","code":"pd_decode_backend_died"}}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
