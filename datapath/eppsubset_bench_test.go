package datapath

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkEPPPickSubset is a whole EPP pick (rule lookup, request facts,
// the ladder, fallbacks, the in-flight charge and Served) on a 16-endpoint
// CHWBL pool with a 4-address subset hint and a 100,000-address one (the
// pool's addresses last, every entry as long as theirs). It uses only the
// picker's API, so the same file measures an older tree for a before and
// after. The endpoints are never dialled: a pick only names them.
func BenchmarkEPPPickSubset(b *testing.B) {
	rt := New(withTestFrontEnd(testOptions()), metrics.NewDatapath(prometheus.NewRegistry()), nil)
	b.Cleanup(func() { _ = rt.Close(context.Background()) })
	addr := func(net, i int) string {
		return fmt.Sprintf("10.%d.%d.%d:8000", net+i/22500, 100+i/150%150, 100+i%150)
	}
	var eps []spec.Endpoint
	pool := make([]string, 16)
	for i := range pool {
		pool[i] = addr(200, i)
		ap := netip.MustParseAddrPort(pool[i])
		eps = append(eps, spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1})
	}
	r := newRule("127.0.2.1", freePort(b), spec.SelCHWBL, eps...)
	r.Name = "epp-subset-bench"
	r.CHWBL = &spec.CHWBL{PrefixHashLevel: 1, MeanLoadFactor: 175, Replication: 100}
	if err := rt.Install(nil, r); err != nil {
		b.Fatal(err)
	}
	p := rt.EPPPicker(r.Name)
	long := make([]string, 0, 100_000)
	for i := range 100_000 - len(pool) {
		long = append(long, addr(100, i))
	}
	long = append(long, pool...)
	for _, h := range []struct {
		name string
		hint []string
	}{{"hint=4", pool[4:8]}, {"hint=100000", long}} {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			req := chatReq("", "the same prompt each time", h.hint)
			for b.Loop() {
				res, err := p.Pick(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				p.Served(epp.Outcome{Result: res, Err: context.Canceled})
			}
		})
	}
}
