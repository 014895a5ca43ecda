package datapath

import (
	"io"
	"net/http"
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
			r := newRule("127.0.0.1", freePortB(b), spec.SelRoundRobin, spec.Endpoint{ID: e.Addr(), Addr: mustAddrPort(e.Addr()), Weight: 1})
			if err := rt.Install(nil, r); err != nil {
				b.Fatal(err)
			}
			url := ruleURL(r) + "/v1/completions"
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			defer c.CloseIdleConnections()
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Post(url, "application/json", strings.NewReader(completionBody))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
