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
// CHWBL pool with a 4-address subset hint, a 100,000-address one and one
// of 1,500,000 (about what the largest request-headers message the EPP
// takes by default can carry), the pool's addresses last and every entry
// as long as theirs. It uses only the
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
	hint := func(n int) []string {
		if n <= len(pool) {
			return pool[len(pool)-n:]
		}
		h := make([]string, 0, n)
		for i := range n - len(pool) {
			h = append(h, addr(100, i))
		}
		return append(h, pool...)
	}
	for _, n := range []int{4, 100_000, 1_500_000} {
		b.Run(fmt.Sprintf("hint=%d", n), func(b *testing.B) {
			// Built here, so a long hint is not live (for the collector to
			// mark) while a shorter one is measured.
			req := chatReq("", "the same prompt each time", hint(n))
			b.ReportAllocs()
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
