package cli

import (
	"testing"

	"github.com/infergate/infergate/api/client"
)

func TestWithDefaultScheme(t *testing.T) {
	tls := client.TLSOptions{CACert: "ca.pem"}
	tests := []struct {
		server string
		tls    client.TLSOptions
		want   string
	}{
		{"127.0.0.1:11111", client.TLSOptions{}, "http://127.0.0.1:11111"},
		{"127.0.0.1:11111", tls, "https://127.0.0.1:11111"},
		{"[::1]:11111", client.TLSOptions{}, "http://[::1]:11111"},
		{"gw.example:11111", client.TLSOptions{Cert: "c.pem", Key: "k.pem"}, "https://gw.example:11111"},
		{"http://127.0.0.1:11111", tls, "http://127.0.0.1:11111"}, // an explicit scheme is kept
		{"https://gw.example", client.TLSOptions{}, "https://gw.example"},
		{"", client.TLSOptions{}, ""},
	}
	for _, tc := range tests {
		if got := withDefaultScheme(tc.server, tc.tls); got != tc.want {
			t.Errorf("withDefaultScheme(%q, %+v) = %q, want %q", tc.server, tc.tls, got, tc.want)
		}
	}
}
