package datapath

import (
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// TestCloseWritesBufferedAccessLines: access lines still in the buffer —
// not full, not yet due — are written when the runtime closes, after its
// requests drained; only then.
func TestCloseWritesBufferedAccessLines(t *testing.T) {
	o := testOptions()
	o.AccessLog.FlushEvery = time.Hour
	logs := &lockedBuffer{}
	log := logrus.New()
	log.SetOutput(logs)
	log.SetFormatter(&logrus.JSONFormatter{})
	rt := New(o, nil, log)
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	const requests = 3
	for range requests {
		if res := post(t, testClient(), ruleURL(r)+"/v1/completions", `{"model":"fake-model","prompt":"hi"}`); res.status != 200 {
			t.Fatalf("status %d %s", res.status, res.body)
		}
	}
	if n := len(logs.accessLines(t)); n != 0 {
		t.Fatalf("%d access lines written before Close, want them buffered", n)
	}
	if err := rt.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(logs.accessLines(t)); n != requests {
		t.Fatalf("%d access lines after Close, want %d:\n%s", n, requests, logs.String())
	}
}
