package daemon

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/metrics"
	"github.com/sirupsen/logrus"
)

// Token reload results (infergate_api_token_reloads_total{result}).
const (
	reloadOK        = "ok"
	reloadUnchanged = "unchanged"
	reloadError     = "error"
)

// apiListenAddr is the address the management API will listen on: the
// injected listener's when there is one (its address is concrete).
func apiListenAddr(opts Options) string {
	if opts.APIListener != nil {
		return opts.APIListener.Addr().String()
	}
	return opts.APIAddr
}

// newGuard applies the exposure rule (no credential off loopback without
// --insecure-api) and loads the token file.
func newGuard(opts Options, log *logrus.Logger) (*auth.Guard, error) {
	addr := apiListenAddr(opts)
	warning, err := auth.CheckExposure(addr, opts.Auth)
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	if warning != "" {
		// Loud on purpose: error level survives any log filtering that
		// keeps the daemon's failures.
		log.WithField("api_addr", addr).Error("daemon: " + warning)
	}
	g, err := auth.NewGuard(addr, opts.Auth)
	if err != nil {
		return nil, fmt.Errorf("daemon: management API access control: %w", err)
	}
	if fi, err := os.Stat(opts.Auth.TokenFile); opts.Auth.TokenFile != "" && err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.WithFields(logrus.Fields{"token_file": opts.Auth.TokenFile, "mode": fi.Mode().Perm().String()}).
			Warn("daemon: the token file is readable by other users; chmod 600 it")
	}
	return g, nil
}

func tokenCount(g *auth.Guard) int {
	if v := g.Verifier(); v != nil {
		return v.Len()
	}
	return 0
}

// watchTokens reloads the token file on SIGHUP and when it changes, until
// ctx ends or the returned stop is called. SIGHUP is always caught so that
// `systemctl reload` never kills a daemon that has nothing to reload.
func watchTokens(ctx context.Context, g *auth.Guard, opts Options, m *metrics.Metrics, log *logrus.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		v := g.Verifier()
		if v == nil {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					log.Info("daemon: SIGHUP: no --api-token-file, nothing to reload")
				}
			}
		}
		v.Watch(ctx, opts.Auth.ReloadInterval, hup, func(e auth.ReloadEvent) {
			l := log.WithFields(logrus.Fields{"trigger": e.Trigger, "tokens": e.Tokens, "token_file": v.Path()})
			switch {
			case e.Err != nil:
				m.API.TokenReloads.WithLabelValues(e.Trigger, reloadError).Inc()
				l.WithError(e.Err).Error("daemon: token file reload failed; the previous tokens stay in force")
			case e.Changed:
				m.API.TokenReloads.WithLabelValues(e.Trigger, reloadOK).Inc()
				l.Info("daemon: API tokens reloaded")
			default:
				m.API.TokenReloads.WithLabelValues(e.Trigger, reloadUnchanged).Inc()
				l.Info("daemon: token file unchanged")
			}
		})
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
	}
}
