package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/infergate/infergate/rules"
)

// TestWideRowWithoutEndpoints: a rule without endpoints fills every
// endpoint column of the wide table with "-", so its row has as many
// columns as a rule's with one endpoint (all cells here are one word).
func TestWideRowWithoutEndpoints(t *testing.T) {
	sa := rules.ServiceArguments{ExternalIP: "127.0.0.9", Port: 8080, Protocol: "tcp", Name: "r"}
	var buf bytes.Buffer
	err := writeTable(&buf, []rules.Rule{
		{ServiceArguments: sa},
		{ServiceArguments: sa, Endpoints: []rules.Endpoint{{EndpointIP: "127.0.0.21", TargetPort: 8000, Weight: 1}}},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows:\n%s", buf.String())
	}
	empty, one := strings.Fields(lines[1]), strings.Fields(lines[2])
	if len(empty) != len(one) {
		t.Errorf("row without endpoints has %d columns, one with an endpoint %d:\n%s", len(empty), len(one), buf.String())
	}
	if last := empty[len(empty)-1]; last != "-" {
		t.Errorf("last cell of a rule without endpoints is %q, want -:\n%s", last, buf.String())
	}
}
