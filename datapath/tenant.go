package datapath

import (
	"net/http"

	"github.com/infergate/infergate/datapath/ladder"
	"github.com/infergate/infergate/spec"
	"github.com/infergate/infergate/tenant"
)

// KeyAdmitter checks a request's API key and takes its share of the key's
// and tenant's limits (*tenant.Registry).
type KeyAdmitter interface {
	Admit(tenant.Check) (tenant.Admission, *tenant.Denial)
}

// Error code of a rule that enforces keys on a gateway without a key store.
const CodeKeysUnavailable = "api_keys_unavailable"

// enforcesKeys is a rule's key policy: api_key_auth "required", or LoxiLB's
// sse_mode when the daemon follows LoxiLB there. It is decided once per
// compiled generation (compiled.keys), not per request.
func enforcesKeys(r *spec.Rule, opts *Options) bool {
	switch r.APIKeys {
	case spec.KeysRequired:
		return true
	case spec.KeysOff:
		return false
	}
	return r.SSE && opts.SSEModeEnforcesKeys
}

// keyCheck is one admitted request's metering state.
type keyCheck struct {
	adm   tenant.Admission
	uw    *tenant.UsageWriter
	model string // metric label
}

// admitKey runs API-key enforcement before any engine is contacted. On
// refusal it answers the client and returns ok false. On success the key
// header is removed, the x-ratelimit-* headers set, a streaming request
// whose client did not ask for usage is asked for it anyway (the usage-only
// chunk is then hidden from the client), and x.w is wrapped so the response's usage
// settles the reservation (finishKey).
func (rt *Runtime) admitKey(x *exchange, c *compiled, body []byte) (*keyCheck, []byte, bool) {
	if rt.opts.Keys == nil {
		rt.fail(x, c, -1, http.StatusServiceUnavailable, CodeKeysUnavailable, "this rule requires API keys but the gateway has no key store")
		return nil, body, false
	}
	top := ladder.ScanBody(body) // a body that is not a JSON object has no fields: the engine refuses it
	// The allow-list is checked against every model the request names: a
	// header naming an allowed model must not carry a body naming another.
	// ScanBody reads field names as the engine does (escapes decoded, exact
	// match, last duplicate wins), so an escaped "mod\u0065l" is seen here.
	model, ok := requestModel(x.r.Header.Get(HeaderModel), top.Model)
	if ok && !sameValues(x.r.Header.Values(HeaderModel)) {
		ok = false // two X-Model headers: the check would see one, a proxy behind might pass the other
	}
	if !ok {
		rt.fail(x, c, -1, http.StatusBadRequest, CodeModelMismatch,
			"the X-Model header and the body's \"model\" name different models; send one, or the same in both")
		return nil, body, false
	}
	shape := tenant.Shape(tenant.BodyFields{Stream: top.Stream, StreamOptions: top.StreamOptions,
		MaxTokens: top.MaxTokens, MaxCompletionTokens: top.MaxCompletionTokens, MaxOutputTokens: top.MaxOutputTokens,
		N: top.N, BestOf: top.BestOf})
	adm, d := rt.opts.Keys.Admit(tenant.Check{
		Key:         tenant.KeyFromHeader(x.r.Header),
		ClientIP:    clientIP(x.r.RemoteAddr),
		Model:       model,
		PromptBytes: len(body),
		Shape:       shape,
	})
	if d != nil {
		if rt.tm != nil {
			rt.tm.Rejections.WithLabelValues(d.TenantID, d.KeyID, d.Code).Inc()
		}
		d.WriteHeaders(x.w.Header())
		rt.fail(x, c, -1, d.Status, d.Code, d.Message)
		return nil, body, false
	}
	if adm.RestrictsModels() && body == nil && hasBody(x.r) {
		adm.Settle(0, 0, true) // nothing was sent: release the reservation
		rt.fail(x, c, -1, http.StatusBadRequest, CodeModelUnverifiable,
			"this API key may only use some models, and the model of a "+strconvQuote(x.r.Header.Get(headerContentType))+
				" body cannot be checked; send a JSON body")
		return nil, body, false
	}
	tenant.StripKey(x.r.Header)
	adm.WriteHeaders(x.w.Header())
	body, asked := tenant.AskForUsage(body, shape)
	if asked {
		x.r.ContentLength = int64(len(body))
	}
	k := &keyCheck{adm: adm, uw: tenant.NewUsageWriter(x.w, asked), model: "any"}
	if model != "" && adm.RestrictsModels() { // then model is one of the allow-listed names
		k.model = model
	}
	x.w = k.uw
	if rt.tm != nil {
		rt.tm.Requests.WithLabelValues(adm.TenantID(), adm.KeyID(), k.model).Inc()
	}
	return k, body, true
}

// finishKey settles the reservation on the engine's usage. A response with
// no usage is charged the reservation if it succeeded, nothing if it failed
// (an engine that refused did no work).
func (rt *Runtime) finishKey(k *keyCheck) {
	k.uw.Close()
	p, cmpl, ok := k.uw.Usage()
	status := k.uw.Status()
	tenantID, keyID, reserved := k.adm.TenantID(), k.adm.KeyID(), k.adm.Reserved()
	switch {
	case ok:
		k.adm.Settle(p, cmpl, true)
	case status >= 400:
		k.adm.Settle(0, 0, true)
	default:
		k.adm.Settle(0, 0, false)
	}
	if rt.tm == nil {
		return
	}
	if ok {
		rt.tm.Tokens.WithLabelValues(tenantID, keyID, k.model, "prompt").Add(float64(p))
		rt.tm.Tokens.WithLabelValues(tenantID, keyID, k.model, "completion").Add(float64(cmpl))
	} else if status < 400 {
		rt.tm.Tokens.WithLabelValues(tenantID, keyID, k.model, "estimated").Add(float64(reserved))
	}
}
