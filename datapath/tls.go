package datapath

import (
	"errors"
	"net/http"
	"time"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tlsmat"
)

// TLS glue. The front door of a listener is admission → TLS →
// HTTP: the TLS layer is tlsmat.Frontend wrapping the accepted net.Listener
// (tls.NewListener with a per-listener GetConfigForClient), and everything
// about certificates lives in tlsmat. This file turns a rule's spec.TLS into
// the runtime objects a generation uses and keeps each listener's set of
// sites in step with its rules.

const headerHSTS = "Strict-Transport-Security"

// ruleTLS is what one generation of a TLS rule holds.
type ruleTLS struct {
	site  *tlsmat.Site // VIP side; released with the generation's ruleState
	up    *upTLS       // engine side (security 2)
	probe *http.Client
}

// upTLS is a generation's TLS to its engines (compiled.up): every leg it
// sends carries it, so its connections are pooled apart.
type upTLS = upstream.TLS

func (t *ruleTLS) release() {
	if t != nil {
		t.site.Close()
	}
}

// buildTLS loads everything r's TLS needs before anything changes; a bad
// certificate, CA or CRL is a 400 naming the field, hostname and file, and
// nothing is held on error.
func (rt *Runtime) buildTLS(r *spec.Rule) (*ruleTLS, error) {
	if r.TLS == nil {
		return nil, nil
	}
	site, err := rt.certs.NewSite(r.TLS.Server)
	if err != nil {
		return nil, materialError(err)
	}
	t := &ruleTLS{site: site}
	if b := r.TLS.Backend; b != nil {
		cfg, err := tlsmat.NewClientConfig(*b, time.Now())
		if err != nil {
			site.Close()
			return nil, materialError(err)
		}
		t.up = rt.up.NewTLS(cfg)
		t.probe = &http.Client{
			Transport: &http.Transport{
				DisableKeepAlives:  true,
				DisableCompression: true,
				TLSClientConfig:    cfg.Clone(), // net/http sets ServerName from the probe URL
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return t, nil
}

// materialError maps tlsmat's errors to the API's typed error.
func materialError(err error) error {
	var fe *tlsmat.FieldError
	if errors.As(err, &fe) {
		msg := fe.MaterialError.Error()
		return &apierror.Error{Status: http.StatusBadRequest, Code: apierror.CodeInvalidField,
			Field: fe.Field, Message: "TLS material cannot be used: " + msg, Err: err}
	}
	var me *tlsmat.MaterialError
	if errors.As(err, &me) {
		return &apierror.Error{Status: http.StatusBadRequest, Code: apierror.CodeInvalidField,
			Field: "serviceArguments.security", Message: "TLS material cannot be used: " + me.Error(), Err: err}
	}
	return err
}

// apply puts t's engine side on a generation.
func (t *ruleTLS) apply(c *compiled) {
	if t != nil {
		c.up, c.probe = t.up, t.probe
	}
}

// checkListenerTLS refuses mixing plaintext and TLS rules on one VIP:port.
func checkListenerTLS(ln *listener, r *spec.Rule) error {
	if (ln.fe != nil) == (r.TLS != nil) {
		return nil
	}
	kind := "plaintext (security 0)"
	if ln.fe != nil {
		kind = "TLS (security 1 or 2)"
	}
	return apierror.Conflict(apierror.CodeInvalidCombo, "serviceArguments.security", "",
		"address "+ln.addr.String()+" already serves "+kind+" rules; one VIP:port is either TLS or plaintext")
}

// refreshSites publishes the sites of the rules now on ln (rt.mu held).
func (ln *listener) refreshSites() {
	if ln.fe == nil {
		return
	}
	sites := make([]*tlsmat.Site, 0, len(ln.rules))
	for _, rs := range ln.rules {
		if rs.tls != nil {
			sites = append(sites, rs.tls.site)
		}
	}
	ln.fe.SetSites(sites)
}

// setHSTS adds the Strict-Transport-Security header of the site the client
// reached, on every answer of a TLS listener (errors included).
func (ln *listener) setHSTS(w http.ResponseWriter, r *http.Request) {
	if ln.fe == nil {
		return
	}
	if v := ln.fe.HSTS(r); v != "" {
		w.Header()[headerHSTS] = []string{v}
	}
}

// siteServes answers 421 misdirected_request (and reports false) when c's
// rule is not served by the TLS site the connection's handshake chose: SNI
// picked the certificate and client-certificate policy, Host/:authority
// picked the rule, and they must agree (tlsmat.Frontend.Misdirected).
func (ln *listener) siteServes(x *exchange, c *compiled) bool {
	if ln.fe == nil || c.rule.TLS == nil {
		return true
	}
	reason := ln.fe.Misdirected(x.r, c.rule.TLS.Server)
	if reason == "" {
		return true
	}
	sni := ""
	if x.r.TLS != nil {
		sni = x.r.TLS.ServerName
	}
	msg := "this connection's TLS handshake (SNI " + strconvQuote(sni) +
		") does not serve the rule for host " + strconvQuote(hostOnly(x.r.Host)) + " (" + reason + "); connect again with that name as SNI"
	ln.rt.fail(x, c, -1, http.StatusMisdirectedRequest, CodeMisdirected, msg)
	return false
}

// probeClient is the HTTP client of the generation's probes.
func (c *compiled) probeClient(rt *Runtime) *http.Client {
	if c.probe != nil {
		return c.probe
	}
	return rt.probeClient
}

// Certs is the SNI certificate store (the API's /sni/certificates).
func (rt *Runtime) Certs() *tlsmat.Store { return rt.certs }

// CertStatus lists the certificates in use with their expiry (/status).
func (rt *Runtime) CertStatus() []tlsmat.Info { return rt.certs.List() }
