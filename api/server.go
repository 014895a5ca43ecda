package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/buildinfo"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/rules"
	"github.com/infergate/infergate/rules/store"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/swagger"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
)

// BasePath is LoxiLB's REST base path; every rule route lives under it.
const BasePath = "/netlox/v1"

// DefaultMaxBodyBytes bounds a management request body. A rule with 32
// endpoints and every knob set is a few KiB; 1 MiB leaves room without
// letting a client make the daemon buffer arbitrary input.
const DefaultMaxBodyBytes int64 = 1 << 20

// StatusSource reports the runtime view of a served rule (the datapath). It
// is optional: without one, rules are listed without runtime status.
type StatusSource interface {
	Status(k spec.Key) (spec.RuleStatus, bool)
}

// RuleStore is what the API needs from the rule store; *store.Store is the
// implementation. An interface so handler tests can inject failures (a
// store error the rules layer cannot produce on demand, a panic).
type RuleStore interface {
	Ready() bool
	Apply(r rules.Rule) (store.Outcome, *spec.Rule, error)
	List() []store.Entry
	Get(vip string, port int, proto string) (store.Entry, error)
	Delete(k spec.Key) error
	DeleteByName(name string) (int, error)
	DeleteAll() (int, error)
}

var _ RuleStore = (*store.Store)(nil)

// Options configures a Server.
type Options struct {
	Store        RuleStore         // required
	Status       StatusSource      // nil: no runtime status
	KV           KVInventorySource // nil: empty KV inventory list
	Explain      Explainer         // nil: POST …/explain answers 501
	Metrics      *metrics.Metrics
	Log          logrus.FieldLogger
	MaxBodyBytes int64 // request body limit, 413 above
	// Certs is the SNI certificate store; nil: /sni/certificates
	// lists nothing and refuses writes, /status shows no certificate.
	Certs CertStore
	// BootDone, if set, must also report true for /readyz to pass: the daemon
	// applies declarative rule files after the store's replay, and a
	// load balancer must not route to it before they are in.
	BootDone func() bool
	// Guard is the access control (api/auth): Host allowlist and bearer
	// tokens. nil serves every request (handler tests); the daemon always
	// sets one.
	Guard *auth.Guard
	// Keys is the tenant key store (API keys, tenant limits); nil answers
	// its routes 501.
	Keys Keys
	// Replicas lists the gateways sharing the rule store (ops_handlers.go);
	// nil: GET …/replicas answers 501 no_shared_store.
	Replicas ReplicaSource
}

// DefaultOptions returns Options with the documented defaults; the caller
// still supplies Store and Metrics.
func DefaultOptions() Options {
	return Options{
		MaxBodyBytes: DefaultMaxBodyBytes,
		Log:          logrus.StandardLogger(),
	}
}

// Server is the management API. Build it with NewServer and serve Handler().
type Server struct {
	store    RuleStore
	status   StatusSource
	kv       KVInventorySource
	explain  Explainer
	metrics  *metrics.Metrics
	log      logrus.FieldLogger
	maxBody  int64
	boot     func() bool
	guard    *auth.Guard
	certs    CertStore
	engine   *gin.Engine
	spec     []byte // the OpenAPI document, rendered once
	keys     Keys
	replicas ReplicaSource
}

// NewServer builds the API and its route tree. It fails only if the OpenAPI
// document cannot be rendered, which is a programming error caught by tests.
func NewServer(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, fmt.Errorf("api: Options.Store is required")
	}
	if opts.Metrics == nil {
		return nil, fmt.Errorf("api: Options.Metrics is required")
	}
	if opts.Log == nil {
		opts.Log = logrus.StandardLogger()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	views := Views()
	views.KVInventory = KVInventoryView{}
	views.Explanation = spec.Explanation{}
	views.SNIList, views.SNIEntry, views.SNIResult = SNICertificateList{}, SNICertificateEntry{}, SNIResult{}
	views.Version, views.Replicas = buildinfo.Info{}, ReplicaList{}
	doc, err := json.Marshal(swagger.Document(views))
	if err != nil {
		return nil, fmt.Errorf("api: render OpenAPI document: %w", err)
	}
	s := &Server{
		store:    opts.Store,
		status:   opts.Status,
		kv:       opts.KV,
		explain:  opts.Explain,
		metrics:  opts.Metrics,
		log:      opts.Log,
		maxBody:  opts.MaxBodyBytes,
		boot:     opts.BootDone,
		guard:    opts.Guard,
		certs:    opts.Certs,
		spec:     doc,
		keys:     opts.Keys,
		replicas: opts.Replicas,
	}
	s.engine = s.routes()
	return s, nil
}

// Handler returns the HTTP handler serving every route.
func (s *Server) Handler() http.Handler { return s.engine }

// Routes lists every registered method and route template (gin syntax). The
// OpenAPI drift test compares it with the document.
func (s *Server) Routes() []gin.RouteInfo { return s.engine.Routes() }

// Route templates, relative to BasePath. The OpenAPI document spells them in
// swagger syntax; TestOpenAPIMatchesRouter keeps the two sets identical.
const (
	routeLB          = "/config/loadbalancer"
	routeLBAll       = routeLB + "/all"
	routeLBByName    = routeLB + "/name/:name"
	routeByKey       = "/externalipaddress/:ip/port/:port/protocol/:proto"
	routeByKeyRange  = "/externalipaddress/:ip/port/:port/portmax/:portmax/protocol/:proto"
	routeLBKey       = routeLB + routeByKey
	routeLBKeyRange  = routeLB + routeByKeyRange
	routeLBHost      = routeLB + "/hosturl/:hosturl" + routeByKey
	routeLBHostRange = routeLB + "/hosturl/:hosturl" + routeByKeyRange
	routeLBCompiled  = routeLBKey + "/compiled"
	routeLBStatus    = routeLBKey + "/status"
	routeMetrics     = "/metrics"
	routeSwaggerJSON = "/swagger.json"
	routeDocs        = "/docs"
)

// routes builds the gin engine. Access control runs before any body is
// read (access.go); write routes go through the boot gate; the body limit
// applies to every route.
func (s *Server) routes() *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.Use(s.observe, s.recoverJSON, s.authorize, s.limitBody)
	e.NoRoute(func(c *gin.Context) {
		writeError(c, s.log, apiNotFound("no such route: "+c.Request.Method+" "+c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		writeError(c, s.log, methodNotAllowed(c.Request.Method, c.Request.URL.Path))
	})

	metricsHandler := gin.WrapH(promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{}))
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET(routeReadyzPD, s.readyzPD) // pdready.go
	e.GET(routeMetrics, metricsHandler)
	e.GET(routeVersion, s.getVersion)

	v1 := e.Group(BasePath)
	v1.GET(routeMetrics, metricsHandler)
	v1.GET(routeSwaggerJSON, s.swaggerJSON)
	v1.GET(routeVersion, s.getVersion)
	v1.GET(routeReplicas, s.getReplicas)
	ui := gin.WrapH(swagger.UIHandler(BasePath + routeDocs))
	v1.GET(routeDocs, ui)
	v1.GET(routeDocs+"/*file", ui)

	v1.GET(routeLBAll, s.listRules)
	v1.GET(routeLBKey, s.getRule)
	v1.GET(routeLBCompiled, s.getCompiled)
	v1.GET(routeLBStatus, s.getStatus)
	v1.GET(routeKVInventory, s.getKVInventory)
	v1.POST(routeLBExplain, s.postExplain) // changes nothing: not boot-gated

	w := v1.Group("", s.bootGate)
	w.POST(routeLB, s.postRule)
	w.DELETE(routeLBAll, s.deleteAll)
	w.DELETE(routeLBByName, s.deleteByName)
	w.DELETE(routeLBKey, s.deleteByKey)
	w.DELETE(routeLBKeyRange, s.deleteByKey)
	w.DELETE(routeLBHost, s.deleteByKey)
	w.DELETE(routeLBHostRange, s.deleteByKey)

	v1.GET(routeAPIKeys, s.listAPIKeys)
	v1.GET(routeAPIKey, s.getAPIKey)
	v1.GET(routeAPIKeyUsage, s.getAPIKeyUsage)
	v1.GET(routeTenantLimit, s.listTenantLimits)
	v1.GET(routeTenantLimitOf, s.getTenantLimit) // tenant_limit.go
	w.POST(routeAPIKeys, s.postAPIKey)
	w.PATCH(routeAPIKey, s.patchAPIKey)
	w.DELETE(routeAPIKey, s.deleteAPIKey)
	w.POST(routeTenantLimit, s.postTenantLimit)
	w.DELETE(routeTenantLimitOf, s.deleteTenantLimit)
	// SNI certificate store (sni_handlers.go).
	v1.GET(routeSNI, s.listSNI)
	w.POST(routeSNI, s.postSNI)
	w.DELETE(routeSNI, s.deleteSNI)
	return e
}

func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// readyz is 200 once boot (replay, then rule files) has finished; load
// balancers in front of the API should route writes only to ready daemons.
func (s *Server) readyz(c *gin.Context) {
	if !s.booted() {
		writeError(c, s.log, s.notBooted())
		return
	}
	// A replica whose shared store is unreachable still serves its last
	// rules (one whose shared key document is unreadable, its last good
	// keys): it stays in rotation (200) but says so, and why (readiness.go).
	if d := s.degraded(); len(d.parts) > 0 {
		c.JSON(http.StatusOK, gin.H{"status": d.status(), "reasons": d.reasons})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}

func (s *Server) swaggerJSON(c *gin.Context) {
	c.Data(http.StatusOK, "application/json", s.spec)
}
