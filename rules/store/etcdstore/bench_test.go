package etcdstore_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/rules/store/storetest"
)

// BenchmarkRuleWrite measures one acknowledged rule update through the
// Store (validate → compile → install → durable commit) on the file store
// (fsync) and on a 1- and 3-member etcd on loopback, in the same run, and
// reports p50/p99. The etcd figures include Raft commit on a quorum.
func BenchmarkRuleWrite(b *testing.B) {
	c1 := etcdtest.Start(b, 1)
	c3 := etcdtest.Start(b, 3)
	cases := []struct {
		name string
		open func(b *testing.B) store.Backend
	}{
		{"file", func(b *testing.B) store.Backend { return openFile(b, b.TempDir()) }},
		{"etcd_1member", func(b *testing.B) store.Backend { return openBackend(b, c1.Endpoints(), "/bench") }},
		{"etcd_3members", func(b *testing.B) store.Backend { return openBackend(b, c3.Endpoints(), "/bench") }},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			r := newReplica(b, nil, "", tc.open(b))
			replay(b, r)
			var lat []time.Duration
			i := 0
			for b.Loop() {
				start := time.Now()
				if _, _, err := r.store.Apply(storetest.Rule(80, fmt.Sprintf("10.4.%d.%d", i/250%250, i%250+1))); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				i++
			}
			reportPercentiles(b, lat)
		})
	}
}

// BenchmarkWriteToAllReplicas measures the time from a write through one
// replica being acknowledged to all three replicas serving it.
func BenchmarkWriteToAllReplicas(b *testing.B) {
	c := etcdtest.Start(b, 3)
	reps := make([]*replica, 3)
	for i := range reps {
		reps[i] = newReplica(b, c.Endpoints(), "/propagate", nil)
		replay(b, reps[i])
	}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		ep := fmt.Sprintf("10.5.%d.%d", i/250%250, i%250+1)
		start := time.Now()
		if _, _, err := reps[i%3].store.Apply(storetest.Rule(80, ep)); err != nil {
			b.Fatal(err)
		}
		for _, r := range reps {
			deadline := time.Now().Add(10 * time.Second)
			for !has(r.store, 80, ep) {
				if time.Now().After(deadline) {
					b.Fatal("a replica did not apply the write within 10 s")
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		lat = append(lat, time.Since(start))
		i++
	}
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50_µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99_µs")
}
