package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/datapath/kvplane"
	"github.com/infergate/infergate/gcfloor"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/tenant"
	"github.com/sirupsen/logrus"
)

// HTTP server timeouts of the management API. Rule bodies are small; these
// only stop a slow client from holding a connection forever.
const (
	apiReadHeaderTimeout = 10 * time.Second
	apiReadTimeout       = 30 * time.Second
	apiWriteTimeout      = 60 * time.Second
	apiIdleTimeout       = 120 * time.Second
)

// stateDirMode keeps persisted rules private: they name every backend.
const stateDirMode = 0o700

// Run serves the gateway until ctx is cancelled, then shuts down gracefully.
// It returns nil after a clean shutdown and an error if boot fails or the API
// server dies.
func Run(ctx context.Context, opts Options, log *logrus.Logger) error {
	if log == nil {
		log = logrus.StandardLogger()
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultOptions().ShutdownTimeout
	}
	// Access control is settled before anything is built: a daemon that
	// must refuse to start should not first bind VIPs or touch state.
	guard, err := newGuard(opts, log)
	if err != nil {
		return err
	}
	if err := checkEPP(opts); err != nil {
		return err
	}
	if err := opts.CheckFrontEnd(); err != nil {
		return err
	}
	if err := opts.Flow.Check(); err != nil { // the datapath's queue classes
		return fmt.Errorf("daemon: %w", err)
	}
	// The collector's heap floor: one per process, so a second daemon in
	// the same process (tests) runs without one.
	defer gcfloor.Start(opts.GC).Stop()
	m := metrics.New()

	if opts.StateDir != "" {
		if err := os.MkdirAll(opts.StateDir, stateDirMode); err != nil {
			return fmt.Errorf("daemon: create state dir %s: %w", opts.StateDir, err)
		}
	}
	backend, shared, err := openBackend(opts, m, log)
	if err != nil {
		return err
	}
	tOpts := opts.Tenant
	tOpts.StateDir = opts.StateDir
	tOpts.Log = log.WithField("component", "tenant")
	if shared != nil {
		tOpts.Shared = shared.Blob(tenantKeysBlob) // keys made through any replica work on all
		tOpts.OnSharedHealth = func(err error) { m.Tenant.KeyStoreUnreadable.Set(boolGauge(err != nil)) }
	}
	keys, err := tenant.Open(tOpts)
	if err != nil {
		closeBackend(backend)
		return fmt.Errorf("daemon: open API-key store: %w", err)
	}
	rt, err := newRuntime(opts, m, keys, log.WithField("component", "datapath"))
	if err != nil {
		closeBackend(backend)
		return fmt.Errorf("daemon: build runtime: %w", err)
	}
	defer closeRuntime(log, rt, runtimeCloseTimeout(opts))

	storeRT, status, closeSel := withSelector(rt, shared, m, log.WithField("component", "selector"))
	if closeSel != nil {
		defer func() { _ = closeSel() }()
	}
	rs, err := store.Open(store.Options{
		StateDir:        opts.StateDir,
		Runtime:         storeRT,
		Log:             log.WithField("component", "rules"),
		Backend:         backend,
		Journal:         opts.RulesJournal,
		OnRejectedValue: func(reason string) { m.Store.RejectedValues.WithLabelValues(reason).Inc() },
	})
	if err != nil {
		if backend != nil {
			_ = backend.Close()
		}
		return fmt.Errorf("daemon: open rule store in %s: %w", opts.StateDir, err)
	}
	defer closeIfCloser(log, "rule store", rs)
	m.Store.SetPendingSource(rs.Pending)

	apiOpts := api.DefaultOptions()
	apiOpts.Store = rs
	apiOpts.Metrics = m
	apiOpts.Log = log.WithField("component", "api")
	var booted atomic.Bool
	apiOpts.BootDone = booted.Load
	apiOpts.Guard = guard
	apiOpts.Keys = keys
	if shared != nil {
		apiOpts.Replicas = replicaLister{shared}
	}
	if status != nil {
		apiOpts.Status = status
	}
	if kv, ok := rt.(interface{ KVPlane() *kvplane.Plane }); ok && kv.KVPlane() != nil {
		apiOpts.KV = kv.KVPlane()
	}
	if dp, ok := rt.(*datapath.Runtime); ok {
		apiOpts.Explain = api.ExplainerOf(dp.Explain)
		apiOpts.Certs = dp.Certs() // /sni/certificates, TLS in /status
	}
	srv, err := api.NewServer(apiOpts)
	if err != nil {
		return fmt.Errorf("daemon: build API: %w", err)
	}

	ln := opts.APIListener
	if ln == nil {
		if ln, err = net.Listen("tcp", opts.APIAddr); err != nil {
			return fmt.Errorf("daemon: listen on %s: %w", opts.APIAddr, err)
		}
	}
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: apiReadHeaderTimeout,
		ReadTimeout:       apiReadTimeout,
		WriteTimeout:      apiWriteTimeout,
		IdleTimeout:       apiIdleTimeout,
	}
	if ln, err = apiTLS(opts, ln, httpSrv); err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	stopReloads := watchTokens(ctx, guard, opts, m, log)
	defer stopReloads()
	log.WithFields(logrus.Fields{
		"addr":      ln.Addr().String(),
		"tls":       opts.APITLSCert != "",
		"state_dir": opts.StateDir,
		"rules":     opts.RulesPath,
		"tokens":    tokenCount(guard),
	}).Info("daemon: management API listening")

	if shared != nil {
		reportReplica(ctx, rs, shared, opts, ln.Addr().String(), m)
		shareTenantLimits(ctx, keys, shared, log.WithField("component", "tenant"))
	}
	stopEPP, err := startEPP(ctx, opts, rt, m, booted.Load, log.WithField("component", "epp"))
	if err != nil {
		_ = httpSrv.Close()
		<-serveErr
		return err
	}
	defer stopEPP() // before the runtime closes: streams settle their picks first
	bootErr := boot(ctx, rs, keys, opts, log)
	if bootErr == nil {
		booted.Store(true)
		log.Info("daemon: ready")
		select {
		case <-ctx.Done():
		case err := <-serveErr:
			// Serve only returns early on a listener failure.
			return fmt.Errorf("daemon: management API stopped: %w", err)
		}
	}

	shCtx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(shCtx); err != nil {
		log.WithError(err).Warn("daemon: API shutdown timed out; closing connections")
		_ = httpSrv.Close()
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.WithError(err).Warn("daemon: management API serve error")
	}
	if bootErr != nil && ctx.Err() == nil {
		return bootErr
	}
	log.Info("daemon: stopped")
	return nil
}

// boot replays persisted rules, then applies the declarative rule files. A
// rule file that cannot be read fails boot (a typo in --rules should be loud);
// a single rule the store rejects is logged with its source and skipped, so
// one bad document cannot take the gateway down.
func boot(ctx context.Context, rs *store.Store, keys *tenant.Registry, opts Options, log *logrus.Logger) error {
	start := time.Now()
	if err := rs.Replay(ctx); err != nil {
		return fmt.Errorf("daemon: replay persisted rules from %s: %w", opts.StateDir, err)
	}
	log.WithFields(logrus.Fields{
		"rules":    len(rs.List()),
		"duration": time.Since(start).String(),
	}).Info("daemon: persisted rules replayed")
	if opts.RulesPath == "" {
		return nil
	}
	docs, err := rules.LoadFiles(opts.RulesPath)
	if err != nil {
		return fmt.Errorf("daemon: load rule files %s: %w", opts.RulesPath, err)
	}
	for _, d := range docs {
		if ctx.Err() != nil {
			return nil // shutting down; what is applied so far is persisted
		}
		if !d.IsRule() {
			applyFileTenantDoc(ctx, keys, d, log)
			continue
		}
		applyFileRule(rs, d, log)
	}
	return nil
}

// applyFileRule applies one declarative rule. Unchanged (identical re-apply,
// reported by the store as 409 rule_exists) is the normal case on restart.
func applyFileRule(rs *store.Store, d rules.Document, log *logrus.Logger) {
	l := log.WithField("source", d.Source)
	outcome, compiled, err := rs.Apply(d.Rule)
	if e, ok := apierror.As(err); ok && e.Code == apierror.CodeRuleExists {
		l.Debug("daemon: file rule unchanged")
		return
	}
	if err != nil {
		l.WithError(err).Error("daemon: file rule rejected; keeping the rest")
		return
	}
	if compiled != nil {
		l = l.WithField("rule", compiled.Key.String())
	}
	switch outcome {
	case store.Created:
		l.Info("daemon: file rule created")
	case store.Updated:
		l.Info("daemon: file rule updated")
	default:
		l.Debug("daemon: file rule unchanged")
	}
}

// contextCloser is how the datapath shuts down: stop listening, then drain
// in-flight requests until ctx ends.
type contextCloser interface {
	Close(ctx context.Context) error
}

// runtimeCloseTimeout gives the runtime its drain window on shutdown.
func runtimeCloseTimeout(opts Options) time.Duration {
	if opts.DrainGrace > 0 {
		return opts.DrainGrace
	}
	return opts.ShutdownTimeout
}

// closeRuntime drains and closes the runtime if it holds resources (the
// no-op runtime does not).
func closeRuntime(log *logrus.Logger, rt store.Runtime, timeout time.Duration) {
	if c, ok := rt.(contextCloser); ok {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			log.WithError(err).Warn("daemon: runtime close failed")
		}
		return
	}
	closeIfCloser(log, "runtime", rt)
}

// closeIfCloser closes v if it holds resources; the contract types do not
// require Close, implementations may add it.
func closeIfCloser(log *logrus.Logger, what string, v interface{}) {
	c, ok := v.(io.Closer)
	if !ok {
		return
	}
	if err := c.Close(); err != nil {
		log.WithError(err).WithField("component", what).Warn("daemon: close failed")
	}
}
