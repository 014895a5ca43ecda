package etcdstore_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/rules/store/storetest"
	"github.com/sirupsen/logrus"
)

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	return l
}

// TestConformance runs the backend suite (the one the file store passes)
// against a real single-member etcd, each subtest under its own prefix.
func TestConformance(t *testing.T) {
	c := etcdtest.Start(t, 1)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) storetest.Location {
		o := etcdstore.DefaultOptions()
		o.Endpoints = c.Endpoints()
		o.Prefix = fmt.Sprintf("/conformance/%d", n.Add(1))
		return storetest.Location{Shared: true, Open: func(t *testing.T) store.Backend {
			b, err := etcdstore.Open(o, quietLog(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}}
	})
}

func jsonOf(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
