package etcdstore_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/rules/store/etcdstore/etcdtest"
	"github.com/infergate/infergate/rules/store/storetest"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// userOptions are the options of a backend on c logging in as root with the
// password in pwFile; the short dial timeout makes a login during an
// outage give up quickly, which is what used to fail Open.
func userOptions(c *etcdtest.Cluster, pwFile string) etcdstore.Options {
	o := etcdstore.DefaultOptions()
	o.Endpoints, o.Prefix = c.Endpoints(), "/login"
	o.Username, o.PasswordFile = "root", pwFile
	o.DialTimeout = 300 * time.Millisecond
	o.RequestTimeout = time.Second
	o.HealthInterval = 100 * time.Millisecond
	return o
}

func wantUnavailable(t *testing.T, what string, err error, mentions string) {
	t.Helper()
	if e, ok := apierror.As(err); !ok || e.Code != apierror.CodeStoreUnavailable || !strings.Contains(err.Error(), mentions) {
		t.Fatalf("%s: %v, want store_unavailable mentioning %q", what, err, mentions)
	}
}

// TestOpenWithUserDuringOutage: with a user, a store opened while etcd is
// down is not refused (the login happens in the background): it reports why
// it is not reachable, answers 503, stays not ready, and replays once etcd
// is back.
func TestOpenWithUserDuringOutage(t *testing.T) {
	c := etcdtest.Start(t, 1)
	pw := c.EnableAuth(t, "s3cret")
	c.Members[0].Kill()
	b, err := etcdstore.Open(userOptions(c, pw), quietLog(), nil)
	if err != nil {
		t.Fatalf("Open during an outage: %v", err)
	}
	r := newReplica(t, nil, "", b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	replayed := make(chan error, 1)
	go func() { replayed <- r.store.Replay(ctx) }()
	eventually(t, 10*time.Second, "a failed login to be reported", func() bool {
		err := b.Health()
		return err != nil && strings.Contains(err.Error(), `etcd not reached yet: logging in as "root"`)
	})
	_, err = b.Load(ctx)
	wantUnavailable(t, "load during the outage", err, "etcd not reached yet")
	if r.store.Ready() {
		t.Fatal("the store is ready before it could load anything")
	}
	// A registry reader started now (the selector's watch) waits for the
	// login instead of failing. (From revision 1: when the watch reaches the
	// server is not ordered with the registration below.)
	engines := b.Client().Watch(ctx, "/login/engines/", clientv3.WithPrefix(), clientv3.WithRev(1))
	if err := c.Members[0].Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-replayed:
		if err != nil {
			t.Fatalf("Replay: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no replay within 20s of etcd coming back")
	}
	eventually(t, 10*time.Second, "the store to report etcd reachable", func() bool { return b.Health() == nil })
	if _, err := b.Commit(ctx, store.Change{Puts: []store.Put{{Key: storetest.Key(80), Value: storetest.Value(t, 80)}}}); err != nil {
		t.Fatalf("commit once logged in: %v", err)
	}
	rctx, stopRegistering := context.WithCancel(ctx)
	defer stopRegistering()
	go func() {
		_ = b.Register(rctx, etcdstore.Registration{URL: "http://10.0.0.5:8000", Role: "decode", Engine: "vllm", Model: "m"}, 5*time.Second, nil)
	}()
	select {
	case resp, ok := <-engines:
		if !ok || len(resp.Events) != 1 || string(resp.Events[0].Kv.Key) != "/login/engines/10.0.0.5:8000" {
			t.Fatalf("watch opened during the outage delivered %+v (open %v), want the registration", resp.Events, ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch opened during the outage saw no registration within 10s")
	}
}

// TestLoginRefused: a wrong password leaves the store unreachable with an
// authentication reason, answered at once rather than after a timeout, and
// logged at error without the password; a corrected password file is read
// on the next attempt.
func TestLoginRefused(t *testing.T) {
	const wrong = "wrong-Pa55-7f3e"
	c := etcdtest.Start(t, 1)
	c.EnableAuth(t, "s3cret")
	pw := etcdtest.PasswordFile(t, wrong)
	log, hook := logtest.NewNullLogger()
	o := userOptions(c, pw)
	o.RequestTimeout = 5 * time.Second
	b, err := etcdstore.Open(o, log, nil)
	if err != nil {
		t.Fatalf("Open with a wrong password: %v", err)
	}
	defer b.Close()
	eventually(t, 10*time.Second, "the refused login to be reported", func() bool {
		return errors.Is(b.Health(), etcdstore.ErrAuthFailed)
	})
	if !strings.Contains(b.Health().Error(), `authentication failed for user "root"`) {
		t.Errorf("health %q does not say the authentication failed", b.Health())
	}
	start := time.Now()
	_, err = b.Load(context.Background())
	wantUnavailable(t, "load with a wrong password", err, "authentication failed")
	if took := time.Since(start); took >= o.RequestTimeout {
		t.Errorf("load took %s: it waited for a login that cannot succeed", took)
	}
	refusals := 0
	for _, e := range hook.AllEntries() {
		line, _ := e.String()
		if strings.Contains(line, wrong) {
			t.Errorf("the password is in the log: %s", line)
		}
		if e.Level == logrus.ErrorLevel && strings.Contains(e.Message, "etcd refused the login") {
			refusals++
		}
	}
	if refusals == 0 {
		t.Errorf("the refused login is not logged at error: %d entries", len(hook.AllEntries()))
	}
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the corrected password to be used", func() bool { return b.Health() == nil })
	if _, err := b.Load(context.Background()); err != nil {
		t.Fatalf("load after the password was corrected: %v", err)
	}
}
