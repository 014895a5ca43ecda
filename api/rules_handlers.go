package api

import (
	"io"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tlsmat"
	"github.com/sirupsen/logrus"
)

// Path parameter names (gin templates use them as ":name").
const (
	paramIP      = "ip"
	paramPort    = "port"
	paramPortMax = "portmax"
	paramProto   = "proto"
	paramHostURL = "hosturl"
	paramName    = "name"
)

// Query parameters that complete a rule's composite key on DELETE, as
// loxicmd sends them. bgp is accepted and ignored (no BGP export here).
const (
	queryBlock         = "block"
	queryPathPrefix    = "path_prefix"
	queryPathMatchMode = "path_match_mode"
	queryModelName     = "model_name"
	queryBGP           = "bgp"
	queryProjectID     = "projectId" // GET all: LoxiLB's convenience filter
)

// Content negotiation of rule bodies.
const (
	headerContentType = "Content-Type"
	mimeJSON          = "application/json"
)

// hostAny is the hosturl path value that means "no host" (LoxiLB's spelling).
const hostAny = "any"

// postRule is LoxiLB's upsert: create, update in place, or 409 on an
// identical re-POST (the store decides which).
func (s *Server) postRule(c *gin.Context) {
	if err := requireJSON(c.GetHeader(headerContentType)); err != nil {
		writeError(c, s.log, err)
		return
	}
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		if errBodyTooLarge(err) {
			writeError(c, s.log, bodyTooLarge(s.maxBody))
			return
		}
		writeError(c, s.log, apierror.BadRequest(apierror.CodeMalformedJSON, "", "malformed request",
			"could not read request body"))
		return
	}
	r, err := rules.DecodeJSON(body)
	if err != nil {
		if _, ok := apierror.As(err); !ok {
			// The decoder failed without saying why in client terms; the
			// body is still the client's problem, not ours.
			err = &apierror.Error{Status: http.StatusBadRequest, Code: apierror.CodeMalformedJSON,
				Result: "malformed request", Message: "request body is not a valid rule: " + err.Error(), Err: err}
		}
		writeError(c, s.log, err)
		return
	}
	outcome, compiled, err := s.store.Apply(r)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	fields := logrus.Fields{"outcome": outcomeName(outcome)}
	if compiled != nil {
		fields["rule"] = compiled.Key.String()
		fields["generation"] = compiled.Generation
	}
	s.log.WithFields(fields).Info("api: rule applied")
	c.JSON(http.StatusOK, ResultBody{Result: resultSuccess})
}

// requireJSON rejects rule bodies not declared as JSON (as LoxiLB's
// go-swagger server does). It is also the API's CSRF guard: a web page can
// only send a cross-origin POST without a CORS preflight if its content type
// is form or text, so insisting on JSON means a browser never delivers a
// forged rule to the management port.
func requireJSON(ct string) error {
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == mimeJSON || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return apierror.New(http.StatusUnsupportedMediaType, codeUnsupportedMediaType, headerContentType,
		"Unsupported media type", "rule bodies must be sent with Content-Type: application/json, got "+strconv.Quote(ct))
}

func outcomeName(o store.Outcome) string {
	switch o {
	case store.Created:
		return "created"
	case store.Updated:
		return "updated"
	case store.Unchanged:
		return "unchanged"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// listRules is GET /config/loadbalancer/all: every rule in wire form,
// decorated with runtime status, optionally only those of one projectId.
func (s *Server) listRules(c *gin.Context) {
	project, filter := c.GetQuery(queryProjectID)
	entries := s.store.List()
	out := rules.RuleList{LbAttr: make([]rules.Rule, 0, len(entries))}
	for _, e := range entries {
		if filter && e.Rule.ServiceArguments.ProjectID != project {
			continue
		}
		out.LbAttr = append(out.LbAttr, s.decorate(e))
	}
	c.JSON(http.StatusOK, out)
}

// getRule is LoxiLB's lookup by VIP+port+protocol (first match).
func (s *Server) getRule(c *gin.Context) {
	e, ok := s.lookup(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, s.decorate(e))
}

// getCompiled shows the effective rule with every default resolved, so an
// operator can see what "0 means default" turned into.
func (s *Server) getCompiled(c *gin.Context) {
	e, ok := s.lookup(c)
	if !ok {
		return
	}
	if e.Compiled == nil {
		writeError(c, s.log, apierror.NotFound(apierror.CodeRuleNotFound, "no-rule error", "rule has no compiled form"))
		return
	}
	c.JSON(http.StatusOK, compiledViewOf(e.Compiled))
}

// getStatus reports the runtime view of one rule.
func (s *Server) getStatus(c *gin.Context) {
	e, ok := s.lookup(c)
	if !ok {
		return
	}
	v := statusViewOf(s.runtimeStatus(e))
	markUnprobed(v, e.Compiled)
	v.TLS = s.tlsStatus(e)
	c.JSON(http.StatusOK, v)
}

// tlsStatus finds the certificate a TLS rule serves (nil for plaintext).
func (s *Server) tlsStatus(e store.Entry) *TLSStatusView {
	t := e.Compiled.TLS
	if t == nil || s.certs == nil {
		return nil
	}
	host := t.Server.CertHost
	if host == "" {
		host = tlsmat.DefaultHostname
	}
	for _, ci := range s.certs.List() {
		if ci.Hostname == host {
			return &TLSStatusView{Security: t.Security, Hostname: ci.Hostname, CertPath: ci.CertPath, Subject: ci.Subject,
				Issuer: ci.Issuer, Serial: ci.Serial, DNSNames: ci.DNSNames,
				NotAfter: ci.NotAfter.UTC().Format(time.RFC3339), ExpiresInSec: ci.ExpiresInSec}
		}
	}
	return &TLSStatusView{Security: t.Security, Hostname: host}
}

func (s *Server) lookup(c *gin.Context) (store.Entry, bool) {
	vip, err := pathIP(c.Param(paramIP))
	if err != nil {
		writeError(c, s.log, err)
		return store.Entry{}, false
	}
	port, err := pathPort(paramPort, c.Param(paramPort))
	if err != nil {
		writeError(c, s.log, err)
		return store.Entry{}, false
	}
	e, err := s.store.Get(vip.String(), port, strings.ToLower(c.Param(paramProto)))
	if err != nil {
		writeError(c, s.log, err)
		return store.Entry{}, false
	}
	return e, true
}

// deleteByKey serves all four LoxiLB key-delete routes: the path carries
// VIP, port (and portmax), protocol and optionally host; the query carries
// the rest of the composite key.
func (s *Server) deleteByKey(c *gin.Context) {
	k, err := keyFromRequest(c)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if err := s.store.Delete(k); err != nil {
		writeError(c, s.log, err)
		return
	}
	s.log.WithField("rule", k.String()).Info("api: rule deleted")
	c.JSON(http.StatusOK, ResultBody{Result: resultSuccess})
}

// deleteByName removes every rule with this name. A name no rule has is
// 404 rule_not_found, as a missing key is: LoxiLB answers Success there,
// which let a typo in a name pass for a delete.
func (s *Server) deleteByName(c *gin.Context) {
	name := c.Param(paramName)
	n, err := s.store.DeleteByName(name)
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	if n == 0 {
		writeError(c, s.log, noRuleNamed(name))
		return
	}
	s.log.WithFields(logrus.Fields{"name": name, "deleted": n}).Info("api: rules deleted by name")
	c.JSON(http.StatusOK, ResultBody{Result: resultSuccess})
}

func (s *Server) deleteAll(c *gin.Context) {
	n, err := s.store.DeleteAll()
	if err != nil {
		writeError(c, s.log, err)
		return
	}
	s.log.WithField("deleted", n).Info("api: all rules deleted")
	c.JSON(http.StatusOK, ResultBody{Result: resultSuccess})
}

// keyFromRequest builds the full composite key of a delete. It goes through
// rules.KeyOf so path_match_mode and friends are canonicalised exactly as on
// create; a hand-built key could silently miss the stored rule.
func keyFromRequest(c *gin.Context) (spec.Key, error) {
	vip, err := pathIP(c.Param(paramIP))
	if err != nil {
		return spec.Key{}, err
	}
	port, err := pathPort(paramPort, c.Param(paramPort))
	if err != nil {
		return spec.Key{}, err
	}
	var sa rules.ServiceArguments
	sa.ExternalIP = vip.String()
	sa.Port = port
	sa.Protocol = strings.ToLower(c.Param(paramProto))
	if pm := c.Param(paramPortMax); pm != "" {
		if sa.PortMax, err = pathPort(paramPortMax, pm); err != nil {
			return spec.Key{}, err
		}
	}
	if h := c.Param(paramHostURL); h != "" && h != hostAny {
		sa.Host = h
	}
	q := c.Request.URL.Query()
	if b := q.Get(queryBlock); b != "" {
		v, err := strconv.ParseUint(b, 10, 32)
		if err != nil {
			return spec.Key{}, apierror.BadRequest(apierror.CodeInvalidField, queryBlock, "malformed arguments",
				"query parameter block must be an unsigned 32-bit integer, got "+strconv.Quote(b))
		}
		sa.Block = uint32(v)
	}
	sa.PathPrefix = q.Get(queryPathPrefix)
	sa.PathMatchMode = q.Get(queryPathMatchMode) // KeyOf canonicalises "disabled" to ""
	sa.ModelName = q.Get(queryModelName)
	_ = q.Get(queryBGP) // accepted for loxicmd compatibility; there is no BGP export
	k, err := rules.KeyOf(rules.Rule{ServiceArguments: sa})
	if err != nil {
		return spec.Key{}, err
	}
	return k, nil
}

// pathIP parses a VIP from a path segment; IPv6 literals may be bracketed.
func pathIP(raw string) (netip.Addr, error) {
	a, ok := rules.ParseIPLiteral(raw)
	if !ok {
		return netip.Addr{}, apierror.BadRequest(apierror.CodeInvalidField, paramIP, "malformed-service error",
			"path parameter ip must be an IPv4 or IPv6 address, got "+strconv.Quote(raw))
	}
	return a, nil
}

func pathPort(name, raw string) (int, error) {
	p, err := strconv.Atoi(raw)
	if err != nil || p < 0 || p > 65535 {
		return 0, apierror.BadRequest(apierror.CodeInvalidField, name, "malformed arguments",
			"path parameter "+name+" must be an integer in 0..65535, got "+strconv.Quote(raw))
	}
	return p, nil
}

// runtimeStatus asks the datapath about e; ok is false without a source or
// when the datapath does not know the rule (yet).
func (s *Server) runtimeStatus(e store.Entry) (spec.RuleStatus, bool) {
	if s.status == nil || e.Compiled == nil {
		return spec.RuleStatus{}, false
	}
	return s.status.Status(e.Compiled.Key)
}

// decorate returns e's wire form with runtime state filled in, read the way
// LoxiLB's GET reads (loxilb_views.go). It copies the endpoint slice: the
// stored entry is shared and must never be written.
func (s *Server) decorate(e store.Entry) rules.Rule {
	r := e.Rule
	r.Endpoints = append([]rules.Endpoint(nil), e.Rule.Endpoints...)
	st, ok := s.runtimeStatus(e)
	if e.InstallError != "" { // stored, not served yet: the store retries it
		ok = false
		r.Status = &rules.RuleStatus{Ready: false, Reason: "not installed (retrying): " + e.InstallError}
	}
	if ok {
		r.Status = &rules.RuleStatus{Ready: st.Ready, Reason: st.Reason, Queue: st.Queue.Summary()}
		for i := range r.Endpoints {
			// Compiled endpoints are the wire endpoints in the same order.
			if es, found := st.Endpoints[e.Compiled.Endpoints[i].ID]; found {
				fillEndpointState(&r.Endpoints[i], es, e.Compiled.AdminDown)
				r.Endpoints[i].Health = unprobedState(r.Endpoints[i].Health, unprobed(e.Compiled, i))
			}
		}
	}
	loxilbView(&r)
	return r
}
