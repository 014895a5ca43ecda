package datapath

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/spec"
)

// Probe types (wire: probetype).
const (
	probeHTTP  = "http"
	probeHTTPS = "https"
	probeTCP   = "tcp"
	probeNone  = "none"
)

const (
	defaultProbeTimeout = time.Second
	maxProbeBody        = 64 << 10 // expected-substring search window
)

// probeDisabled reports whether endpoints are trusted without probing: type
// none (or empty, i.e. monitor off) makes every endpoint active at once.
func probeDisabled(p spec.Probe) bool {
	return p.Type == "" || p.Type == probeNone
}

// newProbeClient returns the HTTP client probes use: no keep-alive, so each
// probe proves a fresh connect works, and no certificate checks on https
// probes (engines commonly serve self-signed certificates; a probe asks
// "alive?", not "trusted?").
func newProbeClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DisableKeepAlives:  true,
			DisableCompression: true,
			TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see doc comment
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// probeOnce runs one probe of addr and returns nil on success.
func probeOnce(ctx context.Context, client *http.Client, p spec.Probe, addr netip.AddrPort) error {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = defaultProbeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	port := addr.Port()
	if p.Port != 0 {
		port = p.Port
	}
	target := netip.AddrPortFrom(addr.Addr(), port).String()
	if p.Type == probeTCP {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", target)
		if err != nil {
			return fmt.Errorf("tcp probe %s: %w", target, err)
		}
		return c.Close()
	}
	path := p.Request
	if path == "" {
		path = "/"
	} else if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	scheme := "http"
	if p.Type == probeHTTPS {
		scheme = "https"
	}
	method := http.MethodGet
	if p.Method != "" {
		method = p.Method
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+target+path, nil)
	if err != nil {
		return fmt.Errorf("probe request for %s: %w", target, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s probe %s: %w", p.Type, target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	if err != nil {
		return fmt.Errorf("%s probe %s: reading body: %w", p.Type, target, err)
	}
	if !p.Codes.Accepts(resp.StatusCode) {
		return fmt.Errorf("%s probe %s: status %s", p.Type, target, strconv.Itoa(resp.StatusCode))
	}
	if p.Response != "" && !strings.Contains(string(body), p.Response) {
		return fmt.Errorf("%s probe %s: response lacks %q", p.Type, target, p.Response)
	}
	return nil
}

// applyProbe advances ep's state machine by one probe result and returns the
// new state when it changed (or -1). probing → active on the first success;
// active/probing → down after retries consecutive failures; down → active
// after rise consecutive successes.
func applyProbe(ep *endpoint, ok bool, retries, rise int) int32 {
	if retries < 1 {
		retries = 1
	}
	if rise < 1 {
		rise = 1
	}
	cur := ep.health.Load()
	if ok {
		ep.failStreak = 0
		ep.okStreak++
		if cur == healthProbing || (cur == healthDown && ep.okStreak >= rise) {
			ep.health.Store(healthActive)
			return healthActive
		}
		return -1
	}
	ep.okStreak = 0
	ep.failStreak++
	if cur != healthDown && ep.failStreak >= retries {
		ep.health.Store(healthDown)
		return healthDown
	}
	return -1
}

// runProber probes every endpoint of the rule's current generation each
// interval (and at once when kicked) until stop is closed, or until the
// current generation no longer probes (prober.go); then it closes done.
func (rt *Runtime) runProber(rs *ruleState, done chan struct{}) {
	defer close(done)
	ctx, cancel := rs.untilStopped()
	defer cancel()
	t := time.NewTicker(rt.opts.ProbeInterval)
	defer t.Stop()
	for {
		c := rs.cur.Load()
		if probeDisabled(c.rule.Probe) && rt.proberIdle(rs) {
			return
		}
		rt.probeRound(ctx, c)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-rs.kick:
		}
	}
}

// probeRound probes each distinct endpoint of c concurrently and publishes
// state changes.
func (rt *Runtime) probeRound(ctx context.Context, c *compiled) {
	p := c.rule.Probe
	if probeDisabled(p) {
		return
	}
	var wg sync.WaitGroup
	for i, ep := range c.eps {
		if i > 0 && c.firstIndex(ep) != i {
			continue // listed twice; probe once
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			epProbe := p
			if own := c.rule.Endpoints[i].Probe; own != nil {
				epProbe = *own // LoxiLB's per-endpoint httpMethod/urlPath/expectedCodes
			}
			err := probeOnce(ctx, c.probeClient(rt), epProbe, ep.addr)
			if ctx.Err() != nil {
				return // shutting down; not the engine's fault
			}
			to := applyProbe(ep, err == nil, p.Retries, rt.opts.ProbeRise)
			if err == nil && c.cb.enabled && ep.br.onProbePass(to == healthActive) {
				rt.log.WithFields(map[string]any{"rule": c.label, "endpoint": ep.id}).
					Info("probe passed: breaker open window ended, next request is the trial")
			}
			if to < 0 {
				return
			}
			for j, e := range c.eps {
				if e == ep {
					c.epm[j].health.Set(float64(to))
				}
			}
			if to == healthDown {
				c.forgetEndpoint(ep.id)
				if c.kv != nil {
					c.kv.EndpointDown(ep.id) // a killed engine's KV blocks are gone
				}
			}
			rt.log.WithFields(map[string]any{
				"rule": c.label, "endpoint": ep.id, "state": healthName(to), "error": errString(err),
			}).Info("endpoint health changed")
		}()
	}
	wg.Wait()
}

func (c *compiled) firstIndex(ep *endpoint) int {
	for i, e := range c.eps {
		if e == ep {
			return i
		}
	}
	return -1
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// untilStopped is a context that ends when the rule stops (rs.stop closes)
// or cancel is called: the rule's background loops (prober, learners) hand
// it to their engine reads so a removal cuts a read in flight.
func (rs *ruleState) untilStopped() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-rs.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
