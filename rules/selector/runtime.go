package selector

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// StatusSource is the datapath's runtime view of a rule.
type StatusSource interface {
	Status(k spec.Key) (spec.RuleStatus, bool)
}

// Options configures a Runtime.
type Options struct {
	Inner  store.Runtime    // the datapath (required)
	Status StatusSource     // the datapath's status, decorated with refusals (optional)
	Client etcdstore.Client // the registry's etcd client (required)
	Prefix string           // the store's prefix: a selector without prefix reads <Prefix>/engines/
	// OnRefused is called once each time a registration becomes refused
	// for a rule, with the Reason… class (the metric).
	OnRefused func(class string)
	// ListTimeout bounds the first read of a prefix during an install.
	ListTimeout time.Duration
	Log         logrus.FieldLogger
}

// DefaultOptions returns the defaults (the caller sets Inner, Client, Prefix).
func DefaultOptions() Options {
	return Options{ListTimeout: time.Second, OnRefused: func(string) {}, Log: logrus.StandardLogger()}
}

// Runtime is a store.Runtime that resolves selector rules' endpoints from
// the registry before handing them to the inner runtime.
type Runtime struct {
	o      Options
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	rules    map[spec.Key]*entry
	regs     map[string][]etcdstore.EngineEntry // by registry prefix
	watching map[string]bool
}

// entry is one selector rule: what the store installed and what the inner
// runtime serves.
type entry struct {
	src       *spec.Rule // from the store, no endpoints
	installed *spec.Rule // src with resolved endpoints
	refused   map[string]Refusal
}

var _ store.Runtime = (*Runtime)(nil)

// New builds a Runtime; Close stops its watches.
func New(o Options) *Runtime {
	def := DefaultOptions()
	if o.ListTimeout <= 0 {
		o.ListTimeout = def.ListTimeout
	}
	if o.OnRefused == nil {
		o.OnRefused = def.OnRefused
	}
	if o.Log == nil {
		o.Log = def.Log
	}
	o.Prefix = "/" + strings.Trim(o.Prefix, "/")
	ctx, cancel := context.WithCancel(context.Background())
	return &Runtime{o: o, ctx: ctx, cancel: cancel, rules: map[spec.Key]*entry{},
		regs: map[string][]etcdstore.EngineEntry{}, watching: map[string]bool{}}
}

// Close stops every registry watch.
func (s *Runtime) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

func (s *Runtime) prefixOf(r *spec.Rule) string {
	if p := r.EndpointSelector.Prefix; p != "" {
		return p
	}
	return s.o.Prefix
}

// Install implements store.Runtime.
func (s *Runtime) Install(prev, next *spec.Rule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	innerPrev := s.servedLocked(prev)
	if next.EndpointSelector == nil {
		if err := s.o.Inner.Install(innerPrev, next); err != nil {
			return err
		}
		s.forgetLocked(prev, next)
		delete(s.rules, next.Key)
		return nil
	}
	prefix := s.prefixOf(next)
	s.ensureWatchLocked(prefix)
	resolved, refused := Resolve(next, s.regs[prefix])
	old := s.rules[next.Key]
	if old != nil {
		resolved.Generation = max(next.Generation, old.installed.Generation+1)
	}
	if err := s.o.Inner.Install(innerPrev, resolved); err != nil {
		return err
	}
	s.forgetLocked(prev, next)
	var oldRefused map[string]Refusal
	if old != nil {
		oldRefused = old.refused
	}
	s.countRefusals(oldRefused, refused)
	s.rules[next.Key] = &entry{src: next, installed: resolved, refused: refused}
	return nil
}

// Remove implements store.Runtime.
func (s *Runtime) Remove(r *spec.Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.o.Inner.Remove(s.servedLocked(r))
	delete(s.rules, r.Key)
}

// RemoveMany implements store.BatchRemover: one batch to the inner runtime.
func (s *Runtime) RemoveMany(rs []*spec.Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	served := make([]*spec.Rule, len(rs))
	for i, r := range rs {
		served[i] = s.servedLocked(r)
		delete(s.rules, r.Key)
	}
	store.RemoveAll(s.o.Inner, served)
}

// servedLocked is what the inner runtime serves for r's key.
func (s *Runtime) servedLocked(r *spec.Rule) *spec.Rule {
	if r == nil {
		return nil
	}
	if e := s.rules[r.Key]; e != nil {
		return e.installed
	}
	return r
}

// forgetLocked drops prev's entry when an install moved the rule to
// another key.
func (s *Runtime) forgetLocked(prev, next *spec.Rule) {
	if prev != nil && prev.Key != next.Key {
		delete(s.rules, prev.Key)
	}
}

// countRefusals reports each registration refused now and not before (or
// for another reason), so re-resolving the same set counts nothing.
func (s *Runtime) countRefusals(before, now map[string]Refusal) {
	for k, r := range now {
		if before[k] != r {
			s.o.OnRefused(r.Class)
			s.o.Log.WithFields(logrus.Fields{"registration": k, "reason": r.Reason}).Warn("selector: registration refused for rule")
		}
	}
}

// Status decorates the inner status of a selector rule with its refusals
// and, when no registration is usable, why it is not ready.
func (s *Runtime) Status(k spec.Key) (spec.RuleStatus, bool) {
	var st spec.RuleStatus
	ok := false
	if s.o.Status != nil {
		st, ok = s.o.Status.Status(k)
	}
	s.mu.Lock()
	e := s.rules[k]
	if e != nil {
		if len(e.refused) > 0 {
			st.Refused = make(map[string]string, len(e.refused))
			for key, r := range e.refused {
				st.Refused[key] = r.Reason
			}
		}
		if len(e.installed.Endpoints) == 0 {
			st.Ready = false
			st.Reason = fmt.Sprintf("no usable registration: endpointSelector model %q under %s/engines/ (%d refused)",
				e.src.EndpointSelector.Model, s.prefixOf(e.src), len(e.refused))
		}
	}
	s.mu.Unlock()
	return st, ok
}

// ensureWatchLocked reads prefix once (bounded) and follows it from then on.
func (s *Runtime) ensureWatchLocked(prefix string) {
	if s.watching[prefix] {
		return
	}
	s.watching[prefix] = true
	ctx, cancel := context.WithTimeout(s.ctx, s.o.ListTimeout)
	list, err := etcdstore.Engines(ctx, s.o.Client, prefix)
	cancel()
	if err != nil {
		s.o.Log.WithError(err).WithField("prefix", prefix).Warn("selector: first read of the registry failed; the watch retries")
	} else {
		s.regs[prefix] = list
	}
	s.wg.Add(1)
	go s.watch(prefix)
}

// watch re-reads prefix after every change under <prefix>/engines/ and
// re-resolves the selector rules that read it, until Close. The watch is
// opened before the read so no change between them is missed.
func (s *Runtime) watch(prefix string) {
	defer s.wg.Done()
	key := prefix + "/engines/"
	for s.ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
		wch := s.o.Client.Watch(wctx, key, clientv3.WithPrefix())
		s.reread(prefix)
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			if len(resp.Events) > 0 {
				s.reread(prefix)
			}
		}
		cancel()
		select {
		case <-s.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Runtime) reread(prefix string) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	list, err := etcdstore.Engines(ctx, s.o.Client, prefix)
	cancel()
	if err != nil {
		if s.ctx.Err() == nil {
			s.o.Log.WithError(err).WithField("prefix", prefix).Warn("selector: registry read failed; keeping the endpoints in use")
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.regs[prefix] = list
	for _, e := range s.rules {
		if s.prefixOf(e.src) == prefix {
			s.reresolveLocked(e)
		}
	}
}

// reresolveLocked re-installs e when its resolution changed.
func (s *Runtime) reresolveLocked(e *entry) {
	resolved, refused := Resolve(e.src, s.regs[s.prefixOf(e.src)])
	if sameEndpoints(resolved.Endpoints, e.installed.Endpoints) {
		if !sameRefusals(refused, e.refused) {
			s.countRefusals(e.refused, refused)
			e.refused = refused
		}
		return
	}
	resolved.Generation = e.installed.Generation + 1
	if err := s.o.Inner.Install(e.installed, resolved); err != nil {
		s.o.Log.WithError(err).WithField("rule", e.src.Key.String()).Warn("selector: re-install with new registrations failed; keeping the endpoints in use")
		return
	}
	s.o.Log.WithFields(logrus.Fields{"rule": e.src.Key.String(), "endpoints": len(resolved.Endpoints), "generation": resolved.Generation}).Info("selector: endpoints follow registrations")
	s.countRefusals(e.refused, refused)
	e.installed, e.refused = resolved, refused
}
