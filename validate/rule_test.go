package validate

import (
	"errors"
	"testing"

	"github.com/infergate/infergate/rules"
)

func TestFindByName(t *testing.T) {
	rule := func(vip string, port int, name string) rules.Rule {
		return rules.Rule{ServiceArguments: rules.ServiceArguments{ExternalIP: vip, Port: port, Protocol: "tcp", Name: name}}
	}
	all := []rules.Rule{rule("127.0.0.10", 8080, "pool"), rule("127.0.0.11", 8080, "pool"), rule("127.0.0.12", 8080, "solo")}
	tests := []struct {
		name    string
		target  string
		wantVIP string
		wantErr string
	}{
		{"one match", "solo", "127.0.0.12", ""},
		{"none", "nope", "", `no rule "nope" among 3 rules (by name, or VIP:port[/protocol])`},
		{"two rules share the name: no guess", "pool", "",
			`2 rules are named "pool" (127.0.0.10:8080/tcp, 127.0.0.11:8080/tcp): validate one by VIP:port[/protocol]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findByName(all, tc.target)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got.ServiceArguments.ExternalIP != tc.wantVIP {
				t.Fatalf("got %s, %v; want %s", got.ServiceArguments.ExternalIP, err, tc.wantVIP)
			}
		})
	}
	var amb errAmbiguousName
	if _, err := findByName(all, "pool"); !errors.As(err, &amb) || len(amb.refs) != 2 {
		t.Fatalf("err %v is not an errAmbiguousName with both rules", err)
	}
}
