package etcdstore

import (
	"slices"
	"testing"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		url       string
		endpoints []string
		prefix    string
		tls       bool
		wantErr   bool
	}{
		{"etcd://127.0.0.1:2379", []string{"127.0.0.1:2379"}, "/infergate", false, false},
		{"etcd://h1:2379,h2:2379/gw/prod", []string{"h1:2379", "h2:2379"}, "/gw/prod", false, false},
		{"etcds://h1:2379/p/", []string{"h1:2379"}, "/p", true, false},
		{"etcd://[::1]:2379", []string{"[::1]:2379"}, "/infergate", false, false},
		{"http://h1:2379", nil, "", false, true},
		{"etcd://h1", nil, "", false, true},
		{"etcd://user:pw@h1:2379", nil, "", false, true},
		{"etcd://h1:2379?x=1", nil, "", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			o := DefaultOptions()
			err := o.ParseURL(tc.url)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseURL(%q) error %v, want error %v", tc.url, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if !slices.Equal(o.Endpoints, tc.endpoints) || o.Prefix != tc.prefix || o.TLS.Enabled != tc.tls {
				t.Fatalf("ParseURL(%q) = %v %q tls=%v", tc.url, o.Endpoints, o.Prefix, o.TLS.Enabled)
			}
		})
	}
}
