package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/infergate/infergate/datapath"
	"github.com/infergate/infergate/epp"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules/store"
	"github.com/sirupsen/logrus"
)

// eppReadyInterval is how often the EPP's readiness is brought in line with
// the daemon's (boot done) and the pool rule's existence. Rules change by
// API call or file; a tenth of a second is well inside any gateway's health
// check period.
const eppReadyInterval = 100 * time.Millisecond

// checkEPP reports EPP options that cannot work, before anything is built.
func checkEPP(opts Options) error {
	if opts.EPP.Addr == "" {
		return nil
	}
	if opts.EPPRule == "" {
		return errors.New("daemon: --epp-rule is required with --epp-addr (the rule that is the EPP's pool)")
	}
	return opts.EPP.Validate()
}

// startEPP serves the endpoint picker over the rule opts.EPPRule when
// opts.EPP.Addr is set: both listeners are bound before it returns (a busy
// port fails startup), its metric families go on the daemon's registry, and
// readiness follows booted() and the rule's existence. stop drains the
// streams (up to the EPP's drain timeout) and returns once every goroutine
// it started is gone.
func startEPP(ctx context.Context, opts Options, rt store.Runtime, m *metrics.Metrics, booted func() bool, log logrus.FieldLogger) (stop func(), err error) {
	if opts.EPP.Addr == "" {
		return func() {}, nil
	}
	dp, ok := rt.(*datapath.Runtime)
	if !ok {
		return nil, fmt.Errorf("daemon: the endpoint picker needs the datapath runtime, not %T", rt)
	}
	picker := dp.EPPPicker(opts.EPPRule)
	srv, err := epp.New(opts.EPP, picker, epp.NewMetrics(m.Registry))
	if err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	lis, err := net.Listen("tcp", opts.EPP.Addr)
	if err != nil {
		return nil, fmt.Errorf("daemon: listen on --epp-addr %s: %w", opts.EPP.Addr, err)
	}
	hlis, err := net.Listen("tcp", opts.EPP.HealthAddr)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("daemon: listen on --epp-health-addr %s: %w", opts.EPP.HealthAddr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, hlis) }()
	readyDone := make(chan struct{})
	go func() {
		defer close(readyDone)
		followReadiness(ctx, srv, func() bool { return booted() && picker.Ready() })
	}()
	log.WithFields(logrus.Fields{
		"addr": lis.Addr().String(), "health_addr": hlis.Addr().String(), "rule": opts.EPPRule,
	}).Info("daemon: endpoint picker listening")
	return func() {
		cancel()
		<-readyDone
		if err := <-served; err != nil {
			log.WithError(err).Warn("daemon: endpoint picker serve error")
		}
	}, nil
}

// followReadiness sets the EPP's readiness from ready until ctx ends.
func followReadiness(ctx context.Context, srv *epp.Server, ready func() bool) {
	t := time.NewTicker(eppReadyInterval)
	defer t.Stop()
	last, first := false, true
	for {
		if r := ready(); r != last || first {
			srv.SetReady(r)
			last, first = r, false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
