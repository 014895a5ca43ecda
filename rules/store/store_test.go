package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// fakeRuntime records what is being served and checks the store's calls are
// coherent (prev is what it serves; removes are of served rules).
type fakeRuntime struct {
	mu      sync.Mutex
	live    map[spec.Key]*spec.Rule
	calls   []string
	fail    func(prev, next *spec.Rule) error
	misuses []string
}

func newFakeRuntime() *fakeRuntime { return &fakeRuntime{live: map[spec.Key]*spec.Rule{}} }

func (f *fakeRuntime) Install(prev, next *spec.Rule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		if err := f.fail(prev, next); err != nil {
			return err
		}
	}
	if cur := f.live[next.Key]; cur != prev {
		f.misuses = append(f.misuses, fmt.Sprintf("Install(prev=%p) but serving %p for %s", prev, cur, next.Key))
	}
	f.live[next.Key] = next
	f.calls = append(f.calls, "install "+next.Key.String())
	return nil
}

func (f *fakeRuntime) Remove(r *spec.Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live[r.Key] != r {
		f.misuses = append(f.misuses, "Remove of a rule not served: "+r.Key.String())
	}
	delete(f.live, r.Key)
	f.calls = append(f.calls, "remove "+r.Key.String())
}

func (f *fakeRuntime) served() map[spec.Key]*spec.Rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[spec.Key]*spec.Rule, len(f.live))
	for k, v := range f.live {
		out[k] = v
	}
	return out
}

func (f *fakeRuntime) checkCoherent(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.misuses) > 0 {
		t.Errorf("runtime misuse: %v", f.misuses)
	}
}

func quietLog() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// fileOptions are a store's options in dir as the daemon sets them: the
// file backend with the write journal on (its default).
func fileOptions(dir string, rt Runtime) Options {
	return Options{StateDir: dir, Runtime: rt, Log: quietLog(), Journal: DefaultJournalOptions()}
}

func openReady(t *testing.T, dir string, rt Runtime) *Store {
	t.Helper()
	return openReadyWith(t, fileOptions(dir, rt))
}

func openReadyWith(t *testing.T, opts Options) *Store {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func withPort(r rules.Rule, port int) rules.Rule {
	r.ServiceArguments.Port = port
	return r
}

// persistedRules is the rule set on disk as the next boot would see it:
// rules.json, through the checks replay uses, with the journal's records
// over it, in rules.json's order (by key), which is what a compaction would
// write. The journal is read first: a compaction running meanwhile replaces
// rules.json before it truncates the journal, so either order of events
// gives the same set.
func persistedRules(t *testing.T, dir string) []rules.Rule {
	t.Helper()
	journal, jerr := os.ReadFile(filepath.Join(dir, journalFileName))
	if jerr != nil && !errors.Is(jerr, fs.ErrNotExist) {
		t.Fatal(jerr)
	}
	vals := map[string][]byte{}
	var seq uint64
	switch data, err := os.ReadFile(filepath.Join(dir, stateFileName)); {
	case err == nil:
		raws, s, reason := decodeState(data)
		if reason != "" {
			t.Fatalf("state file unsound: %s", reason)
		}
		for _, raw := range raws {
			k := keyOfValue(raw)
			if _, dup := vals[k]; k == "" || dup {
				t.Fatalf("state file holds an invalid or repeated rule: %s", raw)
			}
			vals[k] = raw
		}
		seq = s
	case errors.Is(err, fs.ErrNotExist) && jerr == nil:
	default:
		t.Fatalf("nothing persisted: %v, %v", err, jerr)
	}
	recs, _, _, bad := decodeJournal(journal)
	if bad != "" {
		t.Fatalf("journal unsound: %s", bad)
	}
	for _, r := range recs {
		if r.Seq <= seq {
			continue
		}
		if r.Seq != seq+1 {
			t.Fatalf("journal record %d follows %d", r.Seq, seq)
		}
		for _, p := range r.Puts {
			vals[p.Key] = p.Value
		}
		for _, k := range r.Deletes {
			delete(vals, k)
		}
		seq = r.Seq
	}
	out := make([]rules.Rule, 0, len(vals))
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		r, err := rules.DecodeJSON(vals[k])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// snapshotRules reads rules.json alone back through the checks replay uses.
func snapshotRules(t *testing.T, dir string) []rules.Rule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, stateFileName))
	if err != nil {
		t.Fatal(err)
	}
	raws, _, reason := decodeState(data)
	if reason != "" {
		t.Fatalf("state file unsound: %s", reason)
	}
	out := make([]rules.Rule, len(raws))
	for i, raw := range raws {
		if out[i], err = rules.DecodeJSON(raw); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkStateModes fails unless every state file the store wrote (rules.json,
// rules.journal; at least one) is mode 0600.
func checkStateModes(t *testing.T, dir string) {
	t.Helper()
	found := 0
	for _, name := range []string{stateFileName, journalFileName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode: %v %v", name, fi, err)
			continue
		}
		found++
	}
	if found == 0 {
		t.Error("no state file written")
	}
}

func listRules(s *Store) []rules.Rule {
	var out []rules.Rule
	for _, e := range s.List() {
		out = append(out, e.Rule)
	}
	return out
}

func TestStoreNotReadyBeforeReplay(t *testing.T) {
	s, err := Open(Options{StateDir: t.TempDir(), Log: quietLog(), Journal: DefaultJournalOptions()})
	if err != nil {
		t.Fatal(err)
	}
	if s.Ready() {
		t.Fatal("ready before replay")
	}
	calls := map[string]func() error{
		"Apply":        func() error { _, _, err := s.Apply(plainRule()); return err },
		"Delete":       func() error { return s.Delete(spec.Key{}) },
		"DeleteByName": func() error { _, err := s.DeleteByName("x"); return err },
		"DeleteAll":    func() error { _, err := s.DeleteAll(); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			wantAPIError(t, call(), 503, apierror.CodeNotReady, "",
				"configuration writes are rejected until the boot config replay settles")
		})
	}
	if len(s.List()) != 0 {
		t.Error("List not empty")
	}
	if err := s.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !s.Ready() {
		t.Fatal("not ready after replay")
	}
	if err := s.Replay(context.Background()); err == nil {
		t.Error("second Replay succeeded")
	}
}

func TestStoreUpsert(t *testing.T) {
	rt := newFakeRuntime()
	dir := t.TempDir()
	s := openReady(t, dir, rt)

	steps := []struct {
		name    string
		rule    func() rules.Rule
		outcome Outcome
		status  int // 0 = success
		code    string
		field   string
		result  string
		check   func(t *testing.T, c *spec.Rule)
	}{
		{name: "create", rule: pdRule, outcome: Created},
		{name: "identical re-POST", rule: pdRule, outcome: Unchanged, status: 409, code: apierror.CodeRuleExists, result: "lbrule-exists error"},
		{name: "same after defaults", rule: func() rules.Rule {
			r := pdRule()
			r.ServiceArguments.PDCacheThreshold = 20
			r.ServiceArguments.KVEngineType = "vllm"
			r.ServiceArguments.ExternalIP = "10.0.0.10"
			r.ServiceArguments.PathMatchMode = "disabled"
			r.Endpoints[0].State = "active"
			return r
		}, outcome: Unchanged, status: 409, code: apierror.CodeRuleExists, result: "lbrule-exists error"},
		{name: "weight change updates", rule: func() rules.Rule { r := pdRule(); r.Endpoints[0].Weight = 5; return r }, outcome: Updated,
			check: func(t *testing.T, c *spec.Rule) {
				if c.Endpoints[0].Weight != 5 {
					t.Errorf("weight %d", c.Endpoints[0].Weight)
				}
			}},
		{name: "role and nixl change applied", rule: func() rules.Rule {
			r := pdRule()
			r.Endpoints[0].Weight = 5
			r.Endpoints = append(r.Endpoints, rules.Endpoint{EndpointIP: "10.1.0.3", TargetPort: 8000, Weight: 1, EPRole: 1})
			r.Endpoints[1].NixlPort = 9100
			return r
		}, outcome: Updated, check: func(t *testing.T, c *spec.Rule) {
			if len(c.Endpoints) != 3 || c.Endpoints[1].NixlPort != 9100 || c.Endpoints[2].Role != spec.RolePrefill {
				t.Errorf("endpoints %+v", c.Endpoints)
			}
		}},
		{name: "engine change is immutable", rule: func() rules.Rule {
			r := pdRule()
			r.ServiceArguments.KVEngineType = "sglang"
			r.Endpoints[0].NixlPort = 0
			return r
		}, outcome: Unchanged, status: 409, code: apierror.CodeImmutableField, field: "serviceArguments.kvEngineType",
			result: "lbrule-exist error: cant modify rule kv engine type (delete and recreate)"},
		{name: "invalid update rejected", rule: func() rules.Rule { r := pdRule(); r.ServiceArguments.KVExactMode = 3; return r },
			status: 400, code: apierror.CodeInvalidCombo, field: "serviceArguments.kvExactMode"},
		{name: "other model on same VIP is a new rule", rule: func() rules.Rule { r := pdRule(); r.ServiceArguments.ModelName = "m2"; return r }, outcome: Created},
	}
	var lastGen uint64
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			out, c, err := s.Apply(st.rule())
			if st.status != 0 {
				wantAPIError(t, err, st.status, st.code, st.field, st.result)
				if st.outcome == Unchanged && out != Unchanged {
					t.Errorf("outcome %v, want Unchanged", out)
				}
				if s.Generation() != lastGen {
					t.Errorf("generation moved on a failed apply")
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if out != st.outcome {
				t.Errorf("outcome %v, want %v", out, st.outcome)
			}
			if c.Generation <= lastGen || s.Generation() != c.Generation {
				t.Errorf("generation %d after %d (store %d)", c.Generation, lastGen, s.Generation())
			}
			lastGen = c.Generation
			if st.check != nil {
				st.check(t, c)
			}
		})
	}
	rt.checkCoherent(t)
	if got, want := len(s.List()), 2; got != want {
		t.Fatalf("List has %d rules, want %d", got, want)
	}
	if !reflect.DeepEqual(persistedRules(t, dir), listRules(s)) {
		t.Error("persisted rule set differs from List")
	}
	checkStateModes(t, dir)
}

func TestStoreInstallFailureLeavesNothing(t *testing.T) {
	bindErr := apierror.Conflict(apierror.CodeBindFailed, "serviceArguments.externalIP", "", "address in use")
	tests := []struct {
		name   string
		err    error
		status int
		code   string
		field  string
	}{
		{"api error passes through", bindErr, 409, apierror.CodeBindFailed, "serviceArguments.externalIP"},
		{"plain error is internal", errors.New("boom"), 500, apierror.CodeInternal, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := newFakeRuntime()
			dir := t.TempDir()
			s := openReady(t, dir, rt)
			if _, _, err := s.Apply(withPort(plainRule(), 80)); err != nil {
				t.Fatal(err)
			}
			rt.fail = func(_, _ *spec.Rule) error { return tc.err }
			before := listRules(s)
			gen := s.Generation()
			// A create and an update both fail without trace.
			_, _, err := s.Apply(withPort(plainRule(), 81))
			ae := wantAPIError(t, err, tc.status, tc.code, tc.field, "")
			if tc.status == 409 && ae != bindErr {
				t.Error("runtime *apierror.Error was not returned as-is")
			}
			upd := withPort(plainRule(), 80)
			upd.Endpoints[0].Weight = 9
			_, _, err = s.Apply(upd)
			wantAPIError(t, err, tc.status, tc.code, tc.field, "")
			if !reflect.DeepEqual(listRules(s), before) || s.Generation() != gen {
				t.Error("failed Install changed the store")
			}
			if !reflect.DeepEqual(persistedRules(t, dir), before) {
				t.Error("failed Install changed the persisted set")
			}
			if len(rt.served()) != 1 {
				t.Errorf("runtime serves %d rules", len(rt.served()))
			}
			rt.checkCoherent(t)
		})
	}
}

// breakPersist makes s's next durable write fail, even for root: a
// directory takes the place of rules.json (the rename of a rewrite fails)
// and of rules.journal, whose open descriptor is dropped first (the
// journal's reopen for the next append fails).
func breakPersist(t *testing.T, s *Store, dir string) {
	t.Helper()
	b := s.backend.(*FileBackend)
	b.mu.Lock()
	if b.jf != nil {
		b.jf.Close()
		b.jf = nil
	}
	b.mu.Unlock()
	for _, name := range []string{stateFileName, journalFileName} {
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStorePersistFailureRollsBack: a write that cannot be made durable
// fails with 500 persist_failed and leaves the store and the runtime as
// they were, with the journal (the default) and with every write
// rewriting rules.json.
func TestStorePersistFailureRollsBack(t *testing.T) {
	for _, mode := range []struct {
		name    string
		journal JournalOptions
	}{{"journal", DefaultJournalOptions()}, {"rewrite", JournalOptions{}}} {
		t.Run(mode.name, func(t *testing.T) {
			rt := newFakeRuntime()
			dir := t.TempDir()
			opts := fileOptions(dir, rt)
			opts.Journal = mode.journal
			s := openReadyWith(t, opts)
			persistFailureRollsBack(t, s, rt, dir)
		})
	}
}

func persistFailureRollsBack(t *testing.T, s *Store, rt *fakeRuntime, dir string) {
	if _, _, err := s.Apply(withPort(plainRule(), 80)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Apply(withPort(plainRule(), 82)); err != nil {
		t.Fatal(err)
	}
	before := listRules(s)
	servedBefore := rt.served()
	breakPersist(t, s, dir)

	upd := withPort(plainRule(), 80)
	upd.Endpoints[0].Weight = 7
	ops := map[string]func() error{
		"create":       func() error { _, _, err := s.Apply(withPort(plainRule(), 81)); return err },
		"update":       func() error { _, _, err := s.Apply(upd); return err },
		"delete":       func() error { return s.Delete(s.List()[0].Compiled.Key) },
		"deleteByName": func() error { _, err := s.DeleteByName("plain"); return err },
		"deleteAll":    func() error { _, err := s.DeleteAll(); return err },
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			wantAPIError(t, op(), 500, apierror.CodePersistFailed, "", "")
			if !reflect.DeepEqual(listRules(s), before) {
				t.Error("store changed after a failed persist")
			}
			if got := rt.served(); len(got) != len(servedBefore) {
				t.Errorf("runtime serves %d rules, want %d", len(got), len(servedBefore))
			} else {
				for k, r := range servedBefore {
					if !reflect.DeepEqual(got[k], r) {
						t.Errorf("runtime not rolled back for %s", k)
					}
				}
			}
		})
	}
	rt.checkCoherent(t)
}

func TestStoreGetAndDelete(t *testing.T) {
	rt := newFakeRuntime()
	dir := t.TempDir()
	s := openReady(t, dir, rt)
	v6 := plainRule()
	v6.ServiceArguments.ExternalIP = "2001:db8::10"
	v6.ServiceArguments.Name = "v6"
	a := pdRule()
	a.ServiceArguments.Name = "multi"
	b := pdRule()
	b.ServiceArguments.Name = "multi"
	b.ServiceArguments.ModelName = "m2"
	for _, r := range []rules.Rule{v6, a, b, withPort(plainRule(), 90)} {
		if _, _, err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	// List order: VIP, port, protocol, rest of key.
	var order []string
	for _, e := range s.List() {
		order = append(order, e.Compiled.Key.String())
	}
	want := []string{"10.0.0.10:90|tcp", "10.0.0.10:2020|tcp", "10.0.0.10:2020|tcp|model=m2", "[2001:db8::10]:2020|tcp"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("List order %v, want %v", order, want)
	}

	gets := []struct {
		vip    string
		port   int
		proto  string
		status int
		name   string
	}{
		{"[2001:db8::10]", 2020, "tcp", 0, "v6"},
		{"2001:db8:0::10", 2020, "tcp", 0, "v6"},
		{"10.0.0.10", 2020, "tcp", 0, "multi"},
		{"10.0.0.10", 2021, "tcp", 404, ""},
		{"10.0.0.10", 2020, "udp", 404, ""},
		{"not-an-ip", 2020, "tcp", 400, ""},
	}
	for _, g := range gets {
		e, err := s.Get(g.vip, g.port, g.proto)
		switch g.status {
		case 0:
			if err != nil || e.Rule.ServiceArguments.Name != g.name {
				t.Errorf("Get(%s,%d,%s) = %q, %v", g.vip, g.port, g.proto, e.Rule.ServiceArguments.Name, err)
			}
		case 404:
			wantAPIError(t, err, 404, apierror.CodeRuleNotFound, "", "no-rule error")
		default:
			wantAPIError(t, err, 400, apierror.CodeInvalidField, "externalIP", "")
		}
	}

	k, err := rules.KeyOf(v6)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(k); err != nil {
		t.Fatal(err)
	}
	wantAPIError(t, s.Delete(k), 404, apierror.CodeRuleNotFound, "", "no-rule error")
	disabled := withPort(plainRule(), 90)
	disabled.ServiceArguments.PathMatchMode = "disabled"
	kd, _ := rules.KeyOf(disabled)
	kd.PathMatchMode = "disabled" // as a DELETE path parameter would carry it
	if err := s.Delete(kd); err != nil {
		t.Fatalf("Delete with path_match_mode=disabled: %v", err)
	}
	if n, err := s.DeleteByName("nobody"); n != 0 || err != nil {
		t.Errorf("DeleteByName(nobody) = %d, %v", n, err)
	}
	if n, err := s.DeleteByName("multi"); n != 2 || err != nil {
		t.Errorf("DeleteByName(multi) = %d, %v", n, err)
	}
	if _, _, err := s.Apply(plainRule()); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteAll(); n != 1 || err != nil {
		t.Errorf("DeleteAll = %d, %v", n, err)
	}
	if len(s.List()) != 0 || len(rt.served()) != 0 || len(persistedRules(t, dir)) != 0 {
		t.Error("rules left after DeleteAll")
	}
	rt.checkCoherent(t)
}

func TestStoreReplayRestoresAcknowledgedRules(t *testing.T) {
	dir := t.TempDir()
	s := openReady(t, dir, newFakeRuntime())
	for i := 0; i < 10; i++ {
		r := pdRuleN(4)
		r.ServiceArguments.Port = 3000 + i
		r.ServiceArguments.KVEngineType = []string{"", "vllm"}[i%2]
		if _, _, err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.DeleteByName("nothing"); err != nil {
		t.Fatal(err)
	}
	want := s.List()

	rt2 := newFakeRuntime()
	s2 := openReady(t, dir, rt2)
	got := s2.List()
	if len(got) != len(want) {
		t.Fatalf("replayed %d rules, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i].Rule, want[i].Rule) {
			t.Errorf("rule %d differs after replay", i)
		}
		wc, gc := *want[i].Compiled, *got[i].Compiled
		wc.Generation, gc.Generation = 0, 0
		if !reflect.DeepEqual(wc, gc) {
			t.Errorf("compiled rule %d differs after replay", i)
		}
	}
	if len(rt2.served()) != len(want) {
		t.Errorf("replay installed %d rules", len(rt2.served()))
	}
	// The replayed store keeps working and generations keep increasing.
	_, c, err := s2.Apply(withPort(plainRule(), 4000))
	if err != nil || c.Generation <= uint64(len(want)) {
		t.Errorf("apply after replay: gen %v err %v", c, err)
	}
}

func TestStoreReplayQuarantinesCorruptFile(t *testing.T) {
	good, err := encodeState([]Entry{{Rule: plainRule()}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		data   []byte
		reason string
	}{
		{"garbage", []byte("{not json"), "not a valid state document"},
		{"truncated", good[:len(good)/2], "not a valid state document"},
		{"checksum mismatch", bytes.Replace(good, []byte(`"port":2020`), []byte(`"port":2021`), 1), "checksum mismatch"},
		{"wrong schema", bytes.Replace(good, []byte(`"schema_version":1`), []byte(`"schema_version":2`), 1), "unsupported schema_version 2"},
		{"no rules", []byte(`{"schema_version":1,"checksum":"sha256:00"}`), "missing rules"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, stateFileName)
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			var logBuf bytes.Buffer
			log := logrus.New()
			log.SetOutput(&logBuf)
			log.SetFormatter(&logrus.JSONFormatter{})
			now := time.Unix(1700000000, 0)
			s, err := Open(Options{StateDir: dir, Journal: DefaultJournalOptions(), Log: log, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Replay(context.Background()); err != nil {
				t.Fatalf("Replay: %v", err)
			}
			if !s.Ready() || len(s.List()) != 0 {
				t.Fatalf("ready=%v rules=%d after corrupt boot", s.Ready(), len(s.List()))
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("corrupt %s still in place: %v", stateFileName, err)
			}
			q, err := os.ReadFile(path + ".corrupt-1700000000")
			if err != nil || !bytes.Equal(q, tc.data) {
				t.Errorf("quarantined copy missing or altered: %v", err)
			}
			var line map[string]any
			first, _, _ := bytes.Cut(logBuf.Bytes(), []byte("\n"))
			if err := json.Unmarshal(first, &line); err != nil {
				t.Fatalf("want a JSON log line first, got %q", logBuf.String())
			}
			if line["level"] != "error" || line["path"] != path || !strings.Contains(fmt.Sprint(line["reason"]), tc.reason) {
				t.Errorf("log line %v, want level=error path=%s reason~%q", line, path, tc.reason)
			}
			// Boot continues: writes work and persist a sound file again.
			if _, _, err := s.Apply(plainRule()); err != nil {
				t.Fatal(err)
			}
			if len(persistedRules(t, dir)) != 1 {
				t.Error("state file not rewritten")
			}
		})
	}
}

func TestStoreReplaySkipsRulesThatNoLongerValidate(t *testing.T) {
	dir := t.TempDir()
	bad := plainRule()
	bad.ServiceArguments.Port = 81
	bad.ServiceArguments.Mode = 0 // was fine in some older world; now unsupported
	doc, err := encodeState([]Entry{{Rule: withPort(plainRule(), 80)}, {Rule: bad}, {Rule: withPort(plainRule(), 80)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, stateFileName), doc, 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000001, 0)
	s, err := Open(Options{StateDir: dir, Journal: DefaultJournalOptions(), Runtime: newFakeRuntime(), Log: quietLog(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := listRules(s); len(got) != 1 || got[0].ServiceArguments.Port != 80 {
		t.Fatalf("replayed %+v", got)
	}
	if got := persistedRules(t, dir); len(got) != 1 {
		t.Errorf("state file not rewritten without the rejected rules: %d rules", len(got))
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFileName+".rejected-1700000001"))
	if err != nil {
		t.Fatal(err)
	}
	var rej rejectedFile
	if err := json.Unmarshal(data, &rej); err != nil {
		t.Fatal(err)
	}
	if len(rej.Rejected) != 2 || !strings.Contains(rej.Rejected[0].Error, "mode 0 is not served") ||
		!strings.Contains(rej.Rejected[1].Error, "duplicate key") {
		t.Errorf("rejected file %s", data)
	}
	if r, err := rules.DecodeJSON(rej.Rejected[0].Rule); err != nil || r.ServiceArguments.Port != 81 {
		t.Errorf("rejected rule not kept verbatim: %v", err)
	}
}

func TestStoreReplayCancelled(t *testing.T) {
	dir := t.TempDir()
	s := openReady(t, dir, newFakeRuntime())
	if _, _, err := s.Apply(plainRule()); err != nil {
		t.Fatal(err)
	}
	rt := newFakeRuntime()
	s2, err := Open(Options{StateDir: dir, Journal: DefaultJournalOptions(), Runtime: rt, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s2.Replay(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Replay = %v", err)
	}
	if s2.Ready() || len(rt.served()) != 0 {
		t.Error("cancelled replay left the store ready or rules served")
	}
}

// A store without StateDir keeps rules in memory: Apply works, the rule is
// listed, and nothing is written (not even to the working directory).
func TestStoreMemoryOnly(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	s, err := Open(Options{Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, _, err := s.Apply(plainRule()); err != nil || out != Created {
		t.Fatalf("Apply = %v, %v", out, err)
	}
	if n := len(s.List()); n != 1 {
		t.Errorf("List has %d rules after one Apply, want 1", n)
	}
	if files, err := os.ReadDir(wd); err != nil || len(files) != 0 {
		t.Errorf("memory-only store wrote to the working directory: %v, %v", files, err)
	}
}

// 200 concurrent creates/deletes must end with List, the runtime and the
// persisted file agreeing.
func TestStoreConcurrentMutations(t *testing.T) {
	rt := newFakeRuntime()
	dir := t.TempDir()
	s := openReady(t, dir, rt)
	const workers, opsPerWorker = 8, 25 // 200 operations
	var wg sync.WaitGroup
	errs := make(chan error, workers*opsPerWorker)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < opsPerWorker; i++ {
				port := 5000 + (w*opsPerWorker+i)%40 // collide on purpose
				r := withPort(plainRule(), port)
				r.ServiceArguments.Name = "n" + strconv.Itoa(port%3)
				var err error
				switch i % 4 {
				case 0, 1:
					_, _, err = s.Apply(r)
				case 2:
					k, _ := rules.KeyOf(r)
					err = s.Delete(k)
				case 3:
					_, err = s.DeleteByName(r.ServiceArguments.Name)
				}
				if ae, ok := apierror.As(err); err != nil && (!ok || (ae.Code != apierror.CodeRuleExists && ae.Code != apierror.CodeRuleNotFound)) {
					errs <- err
				}
				_ = s.List() // readers run alongside writers
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("unexpected error: %v", err)
	}
	list := s.List()
	served := rt.served()
	if len(served) != len(list) {
		t.Errorf("runtime serves %d rules, List has %d", len(served), len(list))
	}
	for _, e := range list {
		if served[e.Compiled.Key] != e.Compiled {
			t.Errorf("runtime and store disagree on %s", e.Compiled.Key)
		}
	}
	if !reflect.DeepEqual(persistedRules(t, dir), listRules(s)) {
		t.Error("persisted file differs from List")
	}
	rt.checkCoherent(t)
}

const (
	crashDirEnv  = "INFERGATE_RULES_CRASH_DIR"
	crashModeEnv = "INFERGATE_RULES_CRASH_MODE"
)

// crashModes are the file backend's ways of persisting a write that
// TestStoreCrashSafety kills mid-stream: the journal with its default
// bounds (the kill lands between an append and the compaction), the
// journal compacting every 5 records (kills land mid-compaction too), and
// the journal off (every write rewrites rules.json).
var crashModes = map[string]JournalOptions{
	"journal":            DefaultJournalOptions(),
	"journal-compacting": {Enabled: true, MaxRecords: 5},
	"rewrite":            {},
}

// TestCrashHelper is the child of TestStoreCrashSafety: it creates rules,
// deleting every other one right after the next is created, and
// acknowledges each write on stdout ("ack <port>", "del <port>") until it
// is SIGKILLed.
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestStoreCrashSafety")
	}
	j, ok := crashModes[os.Getenv(crashModeEnv)]
	if !ok {
		t.Fatalf("unknown crash mode %q", os.Getenv(crashModeEnv))
	}
	s, err := Open(Options{StateDir: dir, Journal: j, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		port := 10000 + i
		if _, _, err := s.Apply(withPort(pdRuleN(8), port)); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("ack %d\n", port)
		if i%2 == 1 {
			k, err := rules.KeyOf(withPort(pdRuleN(8), port-1))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(k); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("del %d\n", port-1)
		}
	}
	time.Sleep(30 * time.Second) // the parent kills us long before
}

// TestStoreCrashSafety SIGKILLs a process writing rules and reopens its
// state dir: every acknowledged create is served unless its delete was
// acknowledged too, and no acknowledged delete comes back.
func TestStoreCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a subprocess")
	}
	for _, mode := range slices.Sorted(maps.Keys(crashModes)) {
		t.Run(mode, func(t *testing.T) { crashAndReopen(t, mode) })
	}
}

func crashAndReopen(t *testing.T, mode string) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashHelper$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashModeEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked, deleted := map[int]bool{}, map[int]bool{}
	last := 0 // the last acknowledged create
	record := func(line string) {
		if p, ok := strings.CutPrefix(line, "ack "); ok {
			last, _ = strconv.Atoi(p)
			acked[last] = true
		} else if p, ok := strings.CutPrefix(line, "del "); ok {
			n, _ := strconv.Atoi(p)
			deleted[n] = true
		}
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		record(sc.Text())
		if len(acked) >= 40 {
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL mid-stream
		t.Fatal(err)
	}
	// What the child wrote before it died was acknowledged too.
	for sc.Scan() {
		record(sc.Text())
	}
	_, _ = io.Copy(io.Discard, out)
	_ = cmd.Wait()
	if len(acked) < 40 || len(deleted) < 19 {
		t.Fatalf("helper acknowledged only %d creates and %d deletes", len(acked), len(deleted))
	}
	s := openReady(t, dir, newFakeRuntime())
	if tmps, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(tmps) != 0 {
		t.Errorf("stale temp files left after reopen: %v", tmps)
	}
	have := map[int]bool{}
	for _, e := range s.List() {
		have[e.Rule.ServiceArguments.Port] = true
	}
	// The delete of last-1 may have been under way at the kill.
	inFlight := 0
	if (last-10000)%2 == 1 && !deleted[last-1] {
		inFlight = last - 1
	}
	for p := range acked {
		if !have[p] && !deleted[p] && p != inFlight {
			t.Errorf("acknowledged rule on port %d lost after SIGKILL", p)
		}
	}
	for p := range deleted {
		if have[p] {
			t.Errorf("rule on port %d, whose delete was acknowledged, is back after SIGKILL", p)
		}
	}
}

// Callers may decorate List/Get results (GET fills state/counter) without
// touching the stored or persisted rule.
func TestStoreListReturnsCopies(t *testing.T) {
	dir := t.TempDir()
	s := openReady(t, dir, newFakeRuntime())
	r := plainRule()
	if _, _, err := s.Apply(r); err != nil {
		t.Fatal(err)
	}
	l := s.List()
	l[0].Rule.Endpoints[0].State = "active"
	l[0].Rule.ServiceArguments.Name = "changed"
	g, err := s.Get("10.0.0.10", 2020, "tcp")
	if err != nil {
		t.Fatal(err)
	}
	g.Rule.Endpoints[1].Counter = "1:2"
	if got := s.List()[0].Rule; got.Endpoints[0].State != "" || got.Endpoints[1].Counter != "" || got.ServiceArguments.Name != "plain" {
		t.Errorf("stored rule was mutated through List/Get: %+v", got)
	}
	if _, _, err := s.Apply(withPort(plainRule(), 81)); err != nil {
		t.Fatal(err)
	}
	for _, pr := range persistedRules(t, dir) {
		if pr.Endpoints[0].State != "" {
			t.Error("decoration leaked into the state file")
		}
	}
}

// blockingRuntime parks Install until released, to hold a mutation open.
type blockingRuntime struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingRuntime) Install(prev, next *spec.Rule) error {
	b.entered <- struct{}{}
	<-b.release
	return nil
}
func (b *blockingRuntime) Remove(*spec.Rule) {}

// Reads are served from the published snapshot while a mutation is stuck in
// the runtime, and see the change only once it commits.
func TestStoreReadsDoNotWaitForMutations(t *testing.T) {
	rt := &blockingRuntime{entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := openReady(t, t.TempDir(), rt)
	done := make(chan error, 1)
	go func() { _, _, err := s.Apply(plainRule()); done <- err }()
	<-rt.entered // Apply now holds the store mutex
	read := make(chan int, 1)
	go func() {
		n := len(s.List())
		if _, err := s.Get("10.0.0.10", 2020, "tcp"); err == nil {
			n += 100
		}
		read <- n
	}()
	select {
	case n := <-read:
		if n != 0 {
			t.Errorf("reader saw an uncommitted rule (%d)", n)
		}
	case <-time.After(10 * time.Second): // deadlock guard, not a timing assert
		t.Fatal("List/Get blocked behind a mutation")
	}
	close(rt.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(s.List()) != 1 {
		t.Error("committed rule not visible")
	}
}

// A rule the datapath refuses at boot is retried (a restart can race the old
// process for the port), then kept in the set, reported not served with the
// reason, and retried with backoff until it serves: never dropped or set
// aside in a rejected file.
func TestStoreReplayRetriesInstall(t *testing.T) {
	dir := t.TempDir()
	s := openReady(t, dir, newFakeRuntime())
	for _, p := range []int{80, 81} {
		if _, _, err := s.Apply(withPort(plainRule(), p)); err != nil {
			t.Fatal(err)
		}
	}
	rt := newFakeRuntime()
	var mu sync.Mutex
	failures := map[uint16]int{80: 2, 81: 1 << 30} // 80 recovers at replay, 81 later
	rt.fail = func(_, next *spec.Rule) error {
		mu.Lock()
		defer mu.Unlock()
		if failures[next.Key.Port] > 0 {
			failures[next.Key.Port]--
			return apierror.Conflict(apierror.CodeBindFailed, "", "", "address in use")
		}
		return nil
	}
	now := time.Unix(1700000002, 0)
	s2, err := Open(Options{StateDir: dir, Journal: DefaultJournalOptions(), Runtime: rt, Log: quietLog(), Now: func() time.Time { return now },
		ReplayInstallAttempts: 3, ReplayRetryDelay: time.Millisecond, MaxInstallRetryDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	if err := s2.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := s2.List()
	if len(got) != 2 || got[0].InstallError != "" || !strings.Contains(got[1].InstallError, "address in use") {
		t.Fatalf("replayed %d rules, want both with 81 pending: %+v", len(got), got)
	}
	if s2.Pending() != 1 {
		t.Fatalf("Pending = %d, want 1", s2.Pending())
	}
	if m, _ := filepath.Glob(filepath.Join(dir, stateFileName+".rejected-*")); len(m) != 0 {
		t.Fatalf("a valid rule was set aside: %v", m)
	}
	mu.Lock()
	failures[81] = 0 // the address comes up
	mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); s2.Pending() != 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pending rule was not installed once the datapath accepted it")
		}
	}
	if e, err := s2.Get("10.0.0.10", 81, "tcp"); err != nil || e.InstallError != "" {
		t.Fatalf("rule 81 after recovery: %+v %v", e, err)
	}
	// Still in the stored set for the next boot.
	s3 := openReady(t, dir, newFakeRuntime())
	if len(s3.List()) != 2 {
		t.Fatalf("stored set after recovery: %d rules", len(s3.List()))
	}
}
