package datapath

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/infergate/infergate/accesslog"
	"github.com/infergate/infergate/admission"
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/datapath/flow"
	"github.com/infergate/infergate/datapath/h1"
	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/datapath/pd/bufpool"
	"github.com/infergate/infergate/datapath/reqbody"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/enginestats"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tlsmat"
	"github.com/infergate/infergate/tracing"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// Runtime serves compiled rules. It implements store.Runtime (Install,
// Remove) and the API's status source (Status). The control plane (Install,
// Remove, Status, Close) is serialised by mu; the request path takes no lock
// for configuration.
type Runtime struct {
	opts        Options
	m           *metrics.Datapath
	pdm         *metrics.PD     // P/D outcomes, legs, ladder decisions
	rx          *metrics.Radix  // Tier 1 match rate, CHWBL picks
	tm          *metrics.Tenant // API-key enforcement; nil: not exported
	fm          *metrics.Flow   // admission windows and the gateway queue (flowgate.go)
	kv          *kvplane.Plane  // KV-exact state of every rule with kvExactMode
	sender      upstream.Sender // every request to an engine: the proxy's and the P/D legs
	log         logrus.FieldLogger
	up          *upstream.Client         // sender's pools: engine TLS identities, shutdown
	handshakes  *tlsmat.HandshakeLimiter // TLS handshakes per client source; nil: no limit
	probeClient *http.Client
	bufs        sync.Pool       // *[]byte relay buffers
	cands       sync.Pool       // *[]pick.Candidate KV-exact snapshots (select.go)
	gate        *admission.Gate // client connection caps shared by every listener
	bodies      *reqbody.Reader // request bodies against one memory budget
	// pdBuffers is the one pool of prompt-sized buffers (P/D leg bodies,
	// prompt keys) every rule and generation shares, so that what an idle
	// gateway pins does not grow with its rules (Options.PDBuffers).
	pdBuffers *bufpool.Pool
	watch     *h1.Watcher // client departures on every lean listener (frontend.go; rt.mu)

	// es scrapes the engines' own load, per endpoint (enginesig.go).
	es *enginestats.Scraper

	mu        sync.Mutex
	listeners map[netip.AddrPort]*listener
	rules     map[spec.Key]*ruleState
	closed    bool
	drains    sync.WaitGroup // listeners shutting down
	learners  sync.WaitGroup // engine-fact readers: context windows, Mooncake engine ids (ctxwindow.go)

	// TLS (tls.go): the SNI certificate store shared by every TLS listener
	// and the TLS metrics.
	certs *tlsmat.Store
	tlsm  *metrics.TLS

	// llm: client-side LLM latency families; access: the access log (nil:
	// off). Both are fed by observe.go.
	llm    *metrics.LLM
	access *accesslog.Logger
	// tracer exports OpenTelemetry spans (traced.go); nil: off.
	tracer *tracing.Tracer

	// hookServe, when set (tests only, before any Install), runs at the start
	// of every request; it lets tests exercise panic recovery.
	hookServe func(*http.Request)
}

// ruleState is one served rule key: its current generation and its prober.
type ruleState struct {
	key spec.Key
	// lns are the listeners the rule is served on: its VIP's first, then
	// its secondary VIPs' (deduplicated; control plane only, rt.mu).
	lns []*listener
	cur atomic.Pointer[compiled]
	eps map[string]*endpoint // by ID; control plane only (rt.mu)
	tls *ruleTLS             // current generation's TLS objects; nil for security 0 (rt.mu)

	// P/D state that outlives a generation (control plane writes, rt.mu):
	// session pins and the Tier 1 prefix index survive rule updates.
	sessions   *ladder.Sessions
	sessionTTL time.Duration
	prefix     *prefixState
	// flow is the rule's gateway queue (flowgate.go); nil until a
	// generation has an admission window.
	flow *flow.Queue

	kick       chan struct{} // probe now (new endpoints)
	stop       chan struct{}
	proberDone chan struct{} // closed when no prober runs (prober.go; rt.mu)
	probing    bool          // a prober runs for this rule (prober.go; rt.mu)
	learning   bool          // an engine-fact reader runs (ctxwindow.go; rt.mu)
}

// New builds a Runtime. m may be nil (a private registry is used); the P/D,
// prefix-affinity and KV families go to a private registry (NewWithMetrics
// exports them).
func New(opts Options, m *metrics.Datapath, log logrus.FieldLogger) *Runtime {
	reg := prometheus.NewRegistry()
	if m == nil {
		m = metrics.NewDatapath(reg)
	}
	rt := newRuntime(opts, m, metrics.NewPD(reg), metrics.NewRadix(reg), nil, metrics.NewEdge(reg), metrics.NewTLS(reg), log)
	rt.llm = metrics.NewLLM(reg)
	rt.es = newEngineScraper(rt.opts.Engine, metrics.NewEngine(reg), rt.log)
	rt.fm = metrics.NewFlow(reg)
	return rt
}

// NewWithMetrics builds a Runtime that reports on the daemon's full metric
// set (datapath, P/D, radix/CHWBL and KV families).
func NewWithMetrics(opts Options, m *metrics.Metrics, log logrus.FieldLogger) *Runtime {
	if m == nil {
		return New(opts, nil, log)
	}
	edge := m.Edge
	if edge == nil {
		edge = metrics.NewEdge(prometheus.NewRegistry())
	}
	tlsm := m.TLS
	if tlsm == nil {
		tlsm = metrics.NewTLS(prometheus.NewRegistry())
	}
	rt := newRuntime(opts, m.Datapath, m.PD, m.Radix, m.KV, edge, tlsm, log)
	rt.tm = m.Tenant
	if rt.llm = m.LLM; rt.llm == nil {
		rt.llm = metrics.NewLLM(prometheus.NewRegistry())
	}
	rt.fm = m.Flow
	if rt.fm == nil {
		rt.fm = metrics.NewFlow(prometheus.NewRegistry())
	}
	rt.es = newEngineScraper(rt.opts.Engine, m.Engine, rt.log)
	return rt
}

func newRuntime(opts Options, m *metrics.Datapath, pdm *metrics.PD, rx *metrics.Radix, kvm *metrics.KV, edge *metrics.Edge, tlsm *metrics.TLS, log logrus.FieldLogger) *Runtime {
	opts = opts.withDefaults()
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	rt := &Runtime{
		opts:        opts,
		m:           m,
		pdm:         pdm,
		rx:          rx,
		log:         log.WithField("component", "datapath"),
		access:      accesslog.New(opts.AccessLog, log.WithField("component", "access"), m.AccessLogDropped),
		probeClient: newProbeClient(),
		listeners:   make(map[netip.AddrPort]*listener),
		rules:       make(map[spec.Key]*ruleState),
		gate:        admission.New(opts.Admission, edge),
		bodies:      reqbody.New(opts.Bodies, edge),
		pdBuffers:   bufpool.New(opts.PDBuffers),
	}
	rt.up = upstream.NewWithOptions(opts.DialTimeout, opts.MaxIdleConnsPerHost, opts.Upstream, tlsm)
	rt.up.ReapIdle(opts.UpstreamIdleTimeout) // until Close's CloseIdle
	rt.tracer = newTracer(opts.Tracing, rt.log)
	rt.sender = rt.traceSender(rt.up)
	rt.bufs.New = func() any { b := make([]byte, 32<<10); return &b }
	rt.kv = kvplane.New(opts.KV, kvm, log.WithField("component", "kvplane"))
	rt.tlsm = tlsm
	rt.certs = tlsmat.NewStore(opts.TLS, tlsm, log.WithField("component", "tls"))
	rt.certs.Start()
	rt.handshakes = tlsmat.NewHandshakeLimiter(opts.TLS.HandshakesPerIP, opts.TLS.HandshakeBurstPerIP)
	return rt
}

// KVPlane is the KV-exact state of every rule, for the API's inventory view.
func (rt *Runtime) KVPlane() *kvplane.Plane { return rt.kv }

// Install starts serving next, replacing prev (nil on create). On error the
// runtime is exactly as it was; the error is an *apierror.Error.
func (rt *Runtime) Install(prev, next *spec.Rule) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return apierror.New(http.StatusServiceUnavailable, apierror.CodeInternal, "", "", "datapath is shut down")
	}
	if err := rt.checkVIP(next.Key); err != nil {
		return err
	}
	if err := rt.checkEndpointsNotGatewayLocked(next); err != nil {
		return err
	}
	nt, err := rt.buildTLS(next) // before anything changes: a bad certificate is a 400
	if err != nil {
		return err
	}
	if rs := rt.rules[next.Key]; rs != nil {
		lns, created, err := rt.listenersForLocked(next)
		if err != nil {
			nt.release()
			return err
		}
		rt.swapLocked(rs, next, nt)
		rt.startProberLocked(rs) // the new generation may probe where the old did not
		rt.followWindowsLocked(rs)
		rt.moveListenersLocked(rs, lns, created)
		if prev != nil && prev.Key != next.Key {
			rt.removeLocked(prev.Key)
		}
		return nil
	}
	lns, created, err := rt.listenersForLocked(next)
	if err != nil {
		nt.release()
		return err
	}
	rs := &ruleState{
		key:        next.Key,
		tls:        nt,
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		proberDone: noProber(),
	}
	c, eps := newCompiled(next, nil, &rt.opts, rt.m)
	nt.apply(c)
	rs.eps = eps
	var kvPrev *spec.Rule // a key change starts fresh KV state; the old one goes with prev
	rt.attachLocked(rs, c, kvPrev)
	rt.followEngines(c)
	rs.cur.Store(c)
	rt.rules[next.Key] = rs
	rt.moveListenersLocked(rs, lns, created)
	rt.startProberLocked(rs) // none for a rule without probes
	rt.followWindowsLocked(rs)
	if prev != nil && prev.Key != next.Key {
		rt.removeLocked(prev.Key)
	}
	listen := make([]string, len(lns))
	for i, ln := range lns {
		listen[i] = ln.addr.String()
	}
	rt.log.WithFields(logrus.Fields{"rule": c.label, "listen": strings.Join(listen, ","), "endpoints": len(c.eps)}).Info("rule installed")
	return nil
}

// listenersForLocked returns the listeners serving every address of r
// (its VIP, then its secondary VIPs), binding the missing ones. created[i]
// says lns[i] is new (not yet serving). On error nothing was bound.
func (rt *Runtime) listenersForLocked(r *spec.Rule) (lns []*listener, created []bool, err error) {
	for i, addr := range r.ServedAddrs() {
		ln, isNew, err := rt.listenerForLocked(addr, r.TLS != nil)
		if err == nil && !isNew {
			err = checkListenerTLS(ln, r) // one VIP:port is either TLS or plaintext
		}
		if err != nil {
			for j, c := range created {
				if c {
					rt.dropListenerLocked(lns[j])
				}
			}
			if i > 0 { // name the secondary VIP that could not be served
				if ae, ok := apierror.As(err); ok && ae.Field == fieldExternalIP {
					cp := *ae
					cp.Field = fmt.Sprintf("secondaryVIPs[%d].address", i-1)
					err = &cp
				}
			}
			return nil, nil, err
		}
		if slices.Contains(lns, ln) { // BindAnyVIP folds addresses into one
			continue
		}
		lns = append(lns, ln)
		created = append(created, isNew)
	}
	return lns, created, nil
}

// moveListenersLocked makes rs served on exactly lns: it joins the new
// ones (starting those just bound) and leaves the others, closing a
// listener that no rule serves any more.
func (rt *Runtime) moveListenersLocked(rs *ruleState, lns []*listener, created []bool) {
	for i, ln := range lns {
		if !slices.Contains(ln.rules, rs) {
			ln.rules = append(ln.rules, rs)
		}
		ln.table.Store(newRouteTable(ln.rules)) // also refreshes unchanged tables
		ln.applyConnectionLimit()
		ln.refreshSites()
		if created[i] {
			ln.start()
		}
	}
	for _, ln := range rs.lns {
		if !slices.Contains(lns, ln) {
			rt.leaveListenerLocked(rs, ln)
		}
	}
	rs.lns = lns
}

// leaveListenerLocked stops serving rs on ln; when it was ln's last rule
// the socket is closed at once (the address can be reused immediately) and
// in-flight requests drain for up to Options.DrainGrace in the background.
func (rt *Runtime) leaveListenerLocked(rs *ruleState, ln *listener) {
	ln.rules = slices.DeleteFunc(ln.rules, func(x *ruleState) bool { return x == rs })
	ln.table.Store(newRouteTable(ln.rules))
	ln.applyConnectionLimit()
	ln.refreshSites()
	if len(ln.rules) > 0 {
		return
	}
	delete(rt.listeners, ln.addr)
	rt.m.Listeners.Dec()
	ln.closeSocket()
	rt.drains.Add(1)
	go func() {
		defer rt.drains.Done()
		ln.drain(rt.opts.DrainGrace)
	}()
}

// dropListenerLocked undoes a bind that never served (a failed install).
func (rt *Runtime) dropListenerLocked(ln *listener) {
	delete(rt.listeners, ln.addr)
	rt.m.Listeners.Dec()
	ln.closeSocket()
	close(ln.served) // Serve never ran
}

// swapLocked publishes a new generation of an existing rule. In-flight
// requests keep the generation they loaded.
func (rt *Runtime) swapLocked(rs *ruleState, next *spec.Rule, nt *ruleTLS) {
	old := rs.cur.Load()
	c, eps := newCompiled(next, rs.eps, &rt.opts, rt.m)
	nt.apply(c)
	for id := range rs.eps {
		if _, kept := eps[id]; !kept {
			rs.forgetEndpoint(id)
		}
	}
	rt.attachLocked(rs, c, old.rule)
	rt.followEngines(c)
	rs.cur.Store(c)
	if old.label != c.label {
		rt.deleteRuleSeries(old.label)
	} else {
		for id := range rs.eps {
			if _, kept := eps[id]; !kept {
				rt.deleteEndpointSeries(old.label, id)
			}
		}
	}
	dropped := rs.eps
	rs.eps = eps
	for id := range dropped {
		if _, kept := eps[id]; !kept {
			rt.releaseEndpointLocked(id)
		}
	}
	oldTLS := rs.tls
	rs.tls = nt
	for _, ln := range rs.lns {
		ln.table.Store(newRouteTable(ln.rules)) // keys equal; keeps tables fresh
		ln.applyConnectionLimit()
		ln.refreshSites()
	}
	oldTLS.release() // handshakes already past GetConfigForClient keep their config
	select {
	case rs.kick <- struct{}{}:
	default:
	}
	rt.log.WithFields(logrus.Fields{"rule": c.label, "generation": next.Generation, "endpoints": len(c.eps)}).Info("rule updated")
}

func (rt *Runtime) deleteEndpointSeries(label, id string) {
	l := prometheus.Labels{"rule": label, "endpoint": id}
	rt.m.Requests.DeletePartialMatch(l)
	rt.m.Active.Delete(l)
	rt.m.Health.Delete(l)
	rt.m.Breaker.Delete(l)
	rt.m.BreakerTrans.DeletePartialMatch(l)
	rt.pdm.LegRequests.DeletePartialMatch(l)
	rt.llm.DeleteEndpoint(label, id)
}

// deleteRuleSeries drops every series of a rule label. Rules that share a
// name share a label (and series).
func (rt *Runtime) deleteRuleSeries(label string) {
	l := prometheus.Labels{"rule": label}
	for _, v := range rt.ruleVecs() {
		v.DeletePartialMatch(l)
	}
}

// Remove stops serving r. When it was the last rule on its listener the
// socket is closed at once (the port can be reused immediately) and the
// in-flight requests drain for up to Options.DrainGrace in the background.
func (rt *Runtime) Remove(r *spec.Rule) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.removeLocked(r.Key)
}

func (rt *Runtime) removeLocked(k spec.Key) {
	if label, ok := rt.unserveLocked(k); ok {
		// Synchronously: a rule re-created right away under the same name
		// must keep the series it registers now.
		rt.deleteRuleSeries(label)
	}
}

// unserveLocked stops serving the rule with key k and returns its metric
// label; its series are the caller's to delete (removemany.go batches them).
func (rt *Runtime) unserveLocked(k spec.Key) (label string, ok bool) {
	rs := rt.rules[k]
	if rs == nil {
		return "", false
	}
	delete(rt.rules, k)
	close(rs.stop)
	c := rs.cur.Load()
	rt.kv.Remove(c.kv)
	rt.es.Drop(k.String())
	rs.dropPrefix(rt)
	rs.tls.release()
	for _, ln := range rs.lns {
		rt.leaveListenerLocked(rs, ln) // frees the address before Remove returns
	}
	rs.lns = nil
	for id := range rs.eps {
		rt.releaseEndpointLocked(id)
	}
	rt.log.WithFields(logrus.Fields{"rule": c.label}).Info("rule removed")
	return c.label, true
}

// Status reports the runtime view of the rule with key k.
func (rt *Runtime) Status(k spec.Key) (spec.RuleStatus, bool) {
	rt.mu.Lock()
	rs := rt.rules[k]
	rt.mu.Unlock()
	if rs == nil {
		return spec.RuleStatus{}, false
	}
	return rs.cur.Load().status(), true
}

// Close stops every listener and prober and waits, up to ctx, for in-flight
// requests to drain; whatever is left is then cut. The access log's
// buffered lines are written last, up to ctx.
func (rt *Runtime) Close(ctx context.Context) error {
	rt.mu.Lock()
	rt.closed = true
	var lns []*listener
	for _, ln := range rt.listeners {
		lns = append(lns, ln)
	}
	var stops []chan struct{}
	for k, rs := range rt.rules {
		rs.tls.release()
		close(rs.stop)
		stops = append(stops, rs.proberDone)
		delete(rt.rules, k)
	}
	clear(rt.listeners)
	rt.mu.Unlock()

	for _, ln := range lns {
		ln.closeSocket()
		rt.m.Listeners.Dec()
	}
	var errs []error
	for _, ln := range lns {
		if err := ln.shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drain %s: %w", ln.addr, err))
			_ = ln.front.Close()
		}
		<-ln.served
	}
	for _, d := range stops {
		<-d
	}
	rt.learners.Wait() // every rule's stop is closed: each reader returns
	done := make(chan struct{})
	go func() { rt.drains.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("waiting for drains: %w", ctx.Err()))
	}
	rt.es.Close()
	if err := rt.kv.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing KV plane: %w", err))
	}
	rt.up.CloseIdle()
	rt.certs.Close()
	if err := rt.tracer.Shutdown(ctx); err != nil { // exports the last spans
		errs = append(errs, fmt.Errorf("flushing traces: %w", err))
	}
	if err := rt.access.Close(ctx); err != nil { // writes the drained requests' lines
		errs = append(errs, err)
	}
	rt.mu.Lock()
	rt.watch.Close()
	rt.mu.Unlock()
	return errors.Join(errs...)
}

// listenerForLocked returns the listener serving addr, binding a new one
// when needed (a TLS front door when tlsOn). A bind failure is a client
// error naming the address.
func (rt *Runtime) listenerForLocked(addr netip.AddrPort, tlsOn bool) (*listener, bool, error) {
	if ln := rt.listeners[addr]; ln != nil {
		return ln, false, nil
	}
	nl, err := net.Listen("tcp", addr.String())
	if err != nil && rt.opts.BindAnyVIP && errors.Is(err, syscall.EADDRNOTAVAIL) {
		any := netip.AddrPortFrom(netip.IPv4Unspecified(), addr.Port())
		if addr.Addr().Is6() {
			any = netip.AddrPortFrom(netip.IPv6Unspecified(), addr.Port())
		}
		if ln := rt.listeners[any]; ln != nil {
			return ln, false, nil
		}
		addr = any
		nl, err = net.Listen("tcp", addr.String())
	}
	if err != nil {
		return nil, false, bindError(addr, err)
	}
	var fe *tlsmat.Frontend
	if tlsOn {
		fe = tlsmat.NewFrontend(addr.String(), rt.tlsm)
		fe.LimitHandshakes(rt.handshakes) // per source, all VIPs together
	}
	ln := rt.newListener(addr, nl, fe)
	rt.listeners[addr] = ln
	rt.m.Listeners.Inc()
	return ln, true, nil
}

// fieldExternalIP is the API field a VIP bind failure names.
const fieldExternalIP = "serviceArguments.externalIP"

// checkVIP refuses a VIP of 0.0.0.0 or :: unless the operator opted in
// (Options.AllowUnspecifiedVIP): such a rule would listen on every
// interface, including ones the operator never meant to expose.
func (rt *Runtime) checkVIP(k spec.Key) *apierror.Error {
	if rt.opts.AllowUnspecifiedVIP || !k.ListenAddr().Addr().IsUnspecified() {
		return nil
	}
	return apierror.BadRequest(apierror.CodeUnspecifiedVIP, "serviceArguments.externalIP", "",
		fmt.Sprintf("externalIP %s listens on every interface; name the address to serve (or start the daemon with --allow-unspecified-vip)", k.ListenAddr().Addr()))
}

// bindError turns a listen failure into the API's typed error.
func bindError(addr netip.AddrPort, err error) *apierror.Error {
	var e *apierror.Error
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		e = apierror.New(http.StatusConflict, apierror.CodeBindFailed, "serviceArguments.port", "",
			fmt.Sprintf("address %s is already in use", addr))
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		e = apierror.BadRequest(apierror.CodeBindFailed, fieldExternalIP, "",
			fmt.Sprintf("address %s is not a local address (run the daemon with --bind-any-vip to serve it on 0.0.0.0:%d)", addr, addr.Port()))
	case errors.Is(err, syscall.EACCES):
		e = apierror.BadRequest(apierror.CodeBindFailed, "serviceArguments.port", "",
			fmt.Sprintf("no permission to bind %s", addr))
	default:
		e = apierror.BadRequest(apierror.CodeBindFailed, fieldExternalIP, "",
			fmt.Sprintf("cannot bind %s", addr))
	}
	e.Err = err
	return e
}

// newStdLogger routes net/http's internal errors (TLS noise, client resets)
// to logrus at debug level.
func newStdLogger(l logrus.FieldLogger) *log.Logger {
	return log.New(debugWriter{l.WithField("source", "net/http")}, "", 0)
}

type debugWriter struct{ l logrus.FieldLogger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.l.Debug(strings.TrimSpace(string(p)))
	return len(p), nil
}
