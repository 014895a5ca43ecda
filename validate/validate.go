package validate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/infergate/infergate/api/auth"
	"github.com/infergate/infergate/api/client"
	"github.com/infergate/infergate/rules/store/etcdstore"
	"github.com/sirupsen/logrus"
)

// Status is a step's verdict.
type Status string

const (
	Pass Status = "PASS"
	Warn Status = "WARN"
	Fail Status = "FAIL"
	Skip Status = "SKIP" // precondition absent: not evidence of anything
)

// Step names, in the order the workflow runs them.
const (
	StepRuleShape  = "rule shape"
	StepReadiness  = "endpoint readiness"
	StepStatus     = "runtime status"
	StepNonStream  = "non-streaming request"
	StepStream     = "SSE request"
	StepRoles      = "role traffic (metrics)"
	StepCacheAware = "cache-aware probe"
	StepKVExact    = "KV-exact"
	StepDrain      = "drain and restore"
	StepFail       = "fail and recover"
	StepAPIKeys    = "API-key enforcement" // runs after StepStatus, before the probes
)

// Options configure one validation run.
type Options struct {
	// Server is the management API base URL.
	Server string
	// APIClient talks to Server (the CLI's, with --cacert/--cert/--key for
	// an HTTPS API); nil uses a plain client.
	APIClient *http.Client
	// Target is a rule name or VIP:port[/protocol].
	Target string
	// Disruptive drains each endpoint in turn (weight 0), then restores it;
	// then fails each in turn (its port replaced by one that refuses
	// connections, fail.go) and checks the breaker and the peers take over.
	Disruptive bool
	// Model is sent in probes; "" uses the rule's model_name, else the first
	// model an endpoint lists, else DefaultModel.
	Model string
	// Path is the probe path on the VIP.
	Path string
	// Probes is how many requests the cache-aware and drain steps send.
	Probes int
	// RequestTimeout bounds each HTTP request (API, endpoint, probe).
	RequestTimeout time.Duration
	// Settle bounds how long to wait for counters to reflect finished
	// requests (the gateway counts after the last byte is written).
	Settle time.Duration
	// KVWarmupWait bounds how long the KV-exact step waits for ranks still
	// in the rule's warm-up to become trusted (kvWarmupSec, capped here).
	KVWarmupWait time.Duration
	// Progress receives a line per step as it starts and ends (nil: quiet).
	Progress io.Writer
	Log      logrus.FieldLogger
	// Token is the management API bearer token (zero: none). It is sent to
	// the management API only, never to the VIP or the endpoints.
	Token auth.Token

	// Shared rule store of several replicas ("" = a single gateway: the
	// replicas step is skipped) and its etcd client options.
	Store string
	Etcd  etcdstore.Options

	// APIKey is a tenant API key (lxb_…) for rules that enforce keys: probes
	// carry it, and the API-key step checks that a request without it is
	// refused. Never printed. "" skips that step.
	APIKey string
}

// DefaultModel is the probe model when nothing names one.
const DefaultModel = "default"

// DefaultOptions returns the defaults `infergate validate` uses.
func DefaultOptions() Options {
	return Options{
		Server:         "http://127.0.0.1:11111",
		Path:           "/v1/completions",
		Probes:         4,
		RequestTimeout: 30 * time.Second,
		Settle:         3 * time.Second,
		KVWarmupWait:   15 * time.Second,
		Etcd:           etcdstore.DefaultOptions(),
	}
}

// StepResult is one step's outcome and its evidence.
type StepResult struct {
	Name     string        `json:"name"`
	Status   Status        `json:"status"`
	Summary  string        `json:"summary"`
	Evidence []string      `json:"evidence,omitempty"`
	Hints    []Hint        `json:"hints,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Report is a whole run.
type Report struct {
	Target string       `json:"target"`
	Rule   string       `json:"rule"` // metric label of the rule
	Steps  []StepResult `json:"steps"`
	// Passed is false when any step FAILed (WARN and SKIP do not fail) or
	// the run was interrupted.
	Passed bool `json:"passed"`
	// Interrupted: the caller's context ended before every step ran.
	Interrupted bool `json:"interrupted,omitempty"`
}

// Run executes the workflow. It returns an error only when it could not run
// at all (bad options); problems with the rule are FAIL steps in the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	d := DefaultOptions()
	if opts.Target == "" {
		return nil, errors.New("validate: no target rule")
	}
	if opts.Server == "" {
		opts.Server = d.Server
	}
	if opts.Path == "" {
		opts.Path = d.Path
	}
	if opts.Probes <= 0 {
		opts.Probes = d.Probes
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = d.RequestTimeout
	}
	if opts.Settle <= 0 {
		opts.Settle = d.Settle
	}
	if opts.Log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		opts.Log = l
	}
	hc := &http.Client{Timeout: opts.RequestTimeout, Transport: &http.Transport{DisableKeepAlives: true,
		// HTTPS VIPs and engines: validate proves they serve; it
		// is not the place that decides whom to trust.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see comment
	// The API gets its own client (the CLI's TLS trust) and the
	// bearer token rides only on it, so it cannot leak into probes.
	apiBase := http.DefaultTransport.(*http.Transport).Clone()
	apiBase.DisableKeepAlives = true
	var apiRT http.RoundTripper = apiBase
	timeout := opts.RequestTimeout
	if opts.APIClient != nil {
		if opts.APIClient.Transport != nil {
			apiRT = opts.APIClient.Transport
		}
		if opts.APIClient.Timeout > 0 {
			timeout = opts.APIClient.Timeout
		}
	}
	apiHC := &http.Client{Timeout: timeout, Transport: &client.BearerTransport{Base: apiRT, Token: opts.Token}}
	w := &workflow{
		opts:   opts,
		hc:     hc,
		apiHC:  apiHC,
		api:    client.New(opts.Server, apiHC),
		report: &Report{Target: opts.Target, Passed: true},
	}
	w.run(ctx)
	if ctx.Err() != nil {
		w.report.Interrupted, w.report.Passed = true, false
	}
	return w.report, nil
}

// step is one check: it fills res and returns whether later steps that
// depend on a resolved rule can go on.
type step struct {
	name string
	fn   func(ctx context.Context, res *StepResult)
}

func (w *workflow) run(ctx context.Context) {
	steps := []step{
		{StepRuleShape, w.ruleShape},
		{StepReadiness, w.readiness},
		{StepStatus, w.runtimeStatus},
		{StepAPIKeys, w.apiKeys},
		{StepNonStream, w.nonStream},
		{StepStream, w.stream},
		{StepRoles, w.roleTraffic},
		{StepCacheAware, w.cacheAware},
		{StepKVExact, w.kvExact},
		{StepDrain, w.drain},
		{StepFail, w.failEach},
		{StepReplicas, w.replicas},
	}
	for i, s := range steps {
		res := StepResult{Name: s.name}
		if w.progress() != nil {
			fmt.Fprintf(w.progress(), "[%d/%d] %s ...\n", i+1, len(steps), s.name)
		}
		start := time.Now()
		switch {
		case ctx.Err() != nil:
			res.Status, res.Summary = Skip, "interrupted"
		case w.rule == nil && s.name != StepRuleShape:
			res.Status, res.Summary = Skip, "no rule to check"
		default:
			s.fn(ctx, &res)
		}
		res.Duration = time.Since(start)
		if res.Status == Fail {
			w.report.Passed = false
		}
		w.report.Steps = append(w.report.Steps, res)
		if p := w.progress(); p != nil {
			writeStep(p, res)
		}
	}
}

func (w *workflow) progress() io.Writer { return w.opts.Progress }
