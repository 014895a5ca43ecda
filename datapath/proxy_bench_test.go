package datapath

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/spec"
	"github.com/infergate/infergate/test/fakeengine"
)

// BenchmarkProxy compares a completion sent straight to a fake engine
// ("direct", the baseline) with the same request through the datapath
// ("proxied"), in parallel on keep-alive connections. Report the ratio of
// the two ns/op, measured in the same run.
func BenchmarkProxy(b *testing.B) {
	e, err := fakeengine.Start(fakeengine.Options{Name: "bench", NoLog: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	rt := New(DefaultOptions(), nil, nil)
	defer func() { _ = rt.Close(b.Context()) }()
	r := newRule("127.0.0.1", freePortB(b), spec.SelRoundRobin, spec.Endpoint{ID: e.Addr(), Addr: mustAddrPort(e.Addr()), Weight: 1})
	if err := rt.Install(nil, r); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, url string }{
		{"direct", "http://" + e.Addr() + "/v1/completions"},
		{"proxied", ruleURL(r) + "/v1/completions"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			defer c.CloseIdleConnections()
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Post(tc.url, "application/json", strings.NewReader(completionBody))
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

func freePortB(b *testing.B) uint16 {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}
