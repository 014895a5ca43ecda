package upstream

import (
	"context"
	"crypto/tls"
	"net/http"
	"reflect"
	"testing"
)

// recorder is a Sender that keeps the legs it was given.
type recorder struct{ legs []Leg }

func (r *recorder) Send(_ context.Context, leg Leg) (*http.Response, error) {
	r.legs = append(r.legs, leg)
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// TestWithTLS: a wrapped Sender puts its TLS on every leg (whatever the
// caller set) and leaves the caller's Leg untouched; nil TLS wraps nothing.
func TestWithTLS(t *testing.T) {
	c := New(0, 1, nil)
	a, b := c.NewTLS(&tls.Config{}), c.NewTLS(&tls.Config{})
	if a.id == b.id {
		t.Fatalf("two TLS identities share id %q: their pools would mix", a.id)
	}
	for _, tc := range []struct {
		name   string
		wrap   *TLS
		caller *TLS
		want   *TLS
	}{
		{"nil wraps nothing", nil, nil, nil},
		{"nil keeps the caller's", nil, b, b},
		{"plaintext leg gets TLS", a, nil, a},
		{"wrapper wins", a, b, a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			s := WithTLS(rec, tc.wrap)
			if tc.wrap == nil && s != Sender(rec) {
				t.Fatal("WithTLS(s, nil) is not s")
			}
			leg := Leg{Path: "/v1/completions", TLS: tc.caller}
			resp, err := s.Send(context.Background(), leg)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(rec.legs) != 1 || rec.legs[0].TLS != tc.want || leg.TLS != tc.caller {
				t.Fatalf("sent %+v (caller's leg TLS %p), want TLS %p", rec.legs, leg.TLS, tc.want)
			}
		})
	}
}

func TestPoolKey(t *testing.T) {
	c := New(0, 1, nil)
	tc := c.NewTLS(&tls.Config{})
	if tlsID(nil) == tlsID(tc) {
		t.Fatal("TLS and plaintext connections to one address share a pool")
	}
}

// TestHeadListSetInto: SetInto puts the request id and X-Forwarded-For
// into the map when set, replacing any value of their names, and leaves
// empty ones out.
func TestHeadListSetInto(t *testing.T) {
	tests := []struct {
		name string
		list HeadList
		have http.Header
		want http.Header
	}{
		{name: "none", have: http.Header{"A": {"1"}}, want: http.Header{"A": {"1"}}},
		{name: "both added", list: HeadList{RequestID: "id", ForwardedFor: "10.0.0.1"},
			have: http.Header{"A": {"1"}},
			want: http.Header{"A": {"1"}, "X-Request-Id": {"id"}, "X-Forwarded-For": {"10.0.0.1"}}},
		{name: "replaces", list: HeadList{ForwardedFor: "1.1.1.1, 10.0.0.1"},
			have: http.Header{"X-Forwarded-For": {"1.1.1.1", "2.2.2.2"}},
			want: http.Header{"X-Forwarded-For": {"1.1.1.1, 10.0.0.1"}}},
		{name: "request id only", list: HeadList{RequestID: "id"},
			have: http.Header{}, want: http.Header{"X-Request-Id": {"id"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.list.SetInto(tc.have)
			if !reflect.DeepEqual(tc.have, tc.want) {
				t.Errorf("got %v, want %v", tc.have, tc.want)
			}
		})
	}
}
