package cli

import (
	"net"
	"strconv"
	"testing"

	"github.com/infergate/infergate/rules"
)

// TestExamplesAvoidDemoVIPs: `infergate apply -f configs/` while the demo
// runs (what the README suggests trying next) must add rules, not replace
// the demo's: no example may use a demo VIP:port.
func TestExamplesAvoidDemoVIPs(t *testing.T) {
	demo := map[string]string{}
	for _, r := range demoRules() {
		demo[net.JoinHostPort(r.vip, strconv.Itoa(demoDefaultVIPPort))] = r.name
	}
	docs, err := rules.LoadFiles("../configs")
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no example rules loaded from configs/")
	}
	for _, d := range docs {
		if d.Kind != rules.KindLoadbalancer {
			continue
		}
		sa := d.Rule.ServiceArguments
		addr := net.JoinHostPort(sa.ExternalIP, strconv.Itoa(sa.Port))
		if name, ok := demo[addr]; ok {
			t.Errorf("%s serves %s, the demo's %s VIP", d.Source, addr, name)
		}
	}
}
