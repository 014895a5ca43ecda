package datapath

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/spec"
)

// BenchmarkFrontEnd proxies the same completion through each plaintext
// front end in one run (see BenchmarkProxy for the direct baseline):
// compare ns/op and allocs/op between the sub-benchmarks.
func BenchmarkFrontEnd(b *testing.B) {
	e, err := fakeengine.Start(fakeengine.Options{Name: "bench", NoLog: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for _, fe := range []string{FrontEndNetHTTP, FrontEndLean} {
		b.Run(strings.ReplaceAll(fe, "/", "-"), func(b *testing.B) {
			o := DefaultOptions()
			o.HTTPFrontEnd = fe
			rt := New(o, nil, nil)
			defer func() { _ = rt.Close(b.Context()) }()
			r := newRule("127.0.0.1", freePort(b), spec.SelRoundRobin, spec.Endpoint{ID: e.Addr(), Addr: mustAddrPort(e.Addr()), Weight: 1})
			if err := rt.Install(nil, r); err != nil {
				b.Fatal(err)
			}
			postParallel(b, ruleURL(r)+"/v1/completions")
		})
	}
}
