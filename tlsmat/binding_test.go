package tlsmat

import (
	"context"
	"testing"
)

func TestMisdirected(t *testing.T) {
	req := &ClientAuth{Mode: ClientCertRequired, CAPath: "/ca.crt"}
	reqOtherCA := &ClientAuth{Mode: ClientCertRequired, CAPath: "/other.crt"}
	opt := &ClientAuth{Mode: ClientCertOptional, CAPath: "/ca.crt"}
	site := func(host string, ca *ClientAuth) *Site {
		return &Site{params: ServerParams{CertHost: host, Client: ca}}
	}
	for _, tc := range []struct {
		name   string
		hs     *Site // nil: no handshake recorded
		byName bool
		rule   ServerParams
		want   string
	}{
		{"same site", site("a", req), true, ServerParams{CertHost: "a", Client: req}, ""},
		{"same site, other generation's equal policy", site("a", req), true, ServerParams{CertHost: "A", Client: &ClientAuth{Mode: ClientCertRequired, CAPath: "/ca.crt"}}, ""},
		{"open sni to mtls rule", site("b", nil), true, ServerParams{CertHost: "a", Client: req}, MisdirectedClientCert},
		{"open sni to open rule of another host", site("b", nil), true, ServerParams{CertHost: "a"}, MisdirectedCertificate},
		{"mtls sni to open rule of another host", site("a", req), true, ServerParams{CertHost: "b"}, MisdirectedCertificate},
		{"other CA", site("a", reqOtherCA), true, ServerParams{CertHost: "a", Client: req}, MisdirectedClientCert},
		{"optional is a policy too", site("a", nil), true, ServerParams{CertHost: "a", Client: opt}, MisdirectedClientCert},
		{"sni to hostless rule", site("a", nil), true, ServerParams{}, ""},
		{"sni to hostless mtls rule", site("a", nil), true, ServerParams{Client: req}, MisdirectedClientCert},
		{"no sni to open rule", site("", nil), false, ServerParams{CertHost: "a"}, ""},
		{"no sni to mtls rule", site("", nil), false, ServerParams{CertHost: "a", Client: req}, MisdirectedClientCert},
		{"no sni, default enforces the same policy", site("", req), false, ServerParams{CertHost: "a", Client: req}, ""},
		{"stricter handshake, open rule", site("a", req), true, ServerParams{CertHost: "a"}, ""},
		{"no handshake recorded", nil, false, ServerParams{}, MisdirectedNoHandshake},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := (&Frontend{}).ConnContext(context.Background(), nil)
			if tc.hs != nil {
				record(ctx, tc.hs, tc.byName)
			}
			if got := misdirected(ctx, tc.rule); got != tc.want {
				t.Errorf("misdirected = %q, want %q", got, tc.want)
			}
		})
	}
}
