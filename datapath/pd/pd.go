package pd

import (
	"context"
	"net/http"
	"time"

	"github.com/infergate/infergate/datapath/pd/bufpool"
	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
	"github.com/sirupsen/logrus"
)

// Request is the client request as the datapath accepted it. Body is the
// complete client body; Serve never modifies it.
type Request struct {
	Path      string
	Header    http.Header
	Body      []byte
	RequestID string // the datapath's id for this request (client's or generated)
	Rule      *spec.Rule
	// EngineIDs gives the KV engine ids the datapath learned from the
	// engines (a Mooncake prefill's bootstrap /query); nil: none learned.
	EngineIDs EngineIDSource
}

// EngineIDSource is where learned KV engine ids are looked up.
type EngineIDSource interface {
	// KVEngineID is the learned KV engine id of the endpoint with ID id
	// ("" unknown).
	KVEngineID(id string) string
}

// Pair is the endpoint choice the ladder made. AltPrefill is consulted only
// for the single prefill retry (vLLM/TRT) or SGLang pair retry; AltDecode,
// in order, only when a decode's connection fails before the engine got
// the request (shouldRetryDecode).
type Pair struct {
	Prefill, Decode spec.Endpoint
	AltPrefill      []spec.Endpoint
	AltDecode       []spec.Endpoint
	// PrefillDPRank is the data-parallel rank of Prefill that holds the
	// prompt's KV (the KV-exact tier's finding), when HasPrefillDPRank;
	// SGLang sends the prefill leg to it. Alternates have none.
	PrefillDPRank    int
	HasPrefillDPRank bool
	// Unsplit: a role-0 endpoint can serve the request whole. When every
	// decode is unreachable (the engines never got the request), Serve then
	// writes nothing and reports Outcome.DecodeUnreachable, so the datapath
	// serves the request there instead of answering 503 while the dead
	// decode's breaker is still counting towards open.
	Unsplit bool
}

// decodes is the decode order of a pair: the chosen one, then AltDecode.
func (p Pair) decodes() []spec.Endpoint {
	return append([]spec.Endpoint{p.Decode}, p.AltDecode...)
}

// Dialect is everything infergate knows about one engine's P/D: the
// sequence it runs, which APIs it splits, and which client body fields are
// its transfer state. Adding an engine is adding a file with one Dialect
// and registering it in dialects.
type Dialect interface {
	// Serve runs the engine's P/D sequence for one request over s and
	// writes the client response to w. It never panics on engine input and
	// returns only after every leg it started has finished or been
	// cancelled.
	Serve(ctx context.Context, w http.ResponseWriter, req *Request, pair Pair, s upstream.Sender) Outcome
	// Split says how the engine serves a POST to the generation API path
	// (exact path, no query): through Serve, or whole on one endpoint.
	Split(path string) Split
	// TransferFields are the top-level request body fields through which
	// this engine's KV transfer is steered. A client may never set them on
	// a P/D rule (StripClientTransferState, and every leg Serve builds).
	TransferFields() []string
}

// Split is how an engine's P/D serves a POST to one generation API.
type Split struct {
	// Sequence: the engine's KV transfer works on this API; Serve runs it.
	Sequence bool
	// Role serves the request whole, without a transfer, when Sequence is
	// false; another usable role takes it when Role has none, unless Strict.
	Role spec.Role
	// Strict: only Role may serve it (an SGLang decode cannot answer
	// without a prefill's bootstrap room, so only a role-0 endpoint may).
	Strict bool
}

// The generation APIs a dialect may split.
const (
	pathCompletions     = "/v1/completions"
	pathChatCompletions = "/v1/chat/completions"
	pathResponses       = "/v1/responses"
)

// Timeouts are the daemon's bounds on a P/D sequence's engine legs, with
// the one default of each knob: datapath.Options embeds them (the single
// pool shares StreamIdleTimeout for its SSE relays) and the serve flags
// bind to them. The datapath resolves them per rule into Options, capped by
// the rule's inactiveTimeOut.
type Timeouts struct {
	// PrefillTimeout bounds the prefill leg; expiry → 504 pd_prefill_timeout.
	PrefillTimeout time.Duration `yaml:"prefill-timeout"`
	// DecodeFirstByteTimeout bounds decode dispatch → first response byte;
	// expiry → 504 pd_decode_timeout.
	DecodeFirstByteTimeout time.Duration `yaml:"decode-first-byte-timeout"`
	// StreamIdleTimeout bounds engine silence inside an SSE stream.
	StreamIdleTimeout time.Duration `yaml:"stream-idle-timeout"`
}

// DefaultTimeouts are the bounds a gateway runs with: 30 s prefill, 60 s
// to the decode's first byte, 120 s of silence inside a stream.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		PrefillTimeout:         30 * time.Second,
		DecodeFirstByteTimeout: 60 * time.Second,
		StreamIdleTimeout:      120 * time.Second,
	}
}

// Options are one rule's knobs of a dialect: the daemon's Timeouts
// resolved for the rule (see Timeouts) plus what only the dialects use.
type Options struct {
	// PrefillTimeout bounds the prefill leg (vLLM/TRT: request to complete
	// response; SGLang: dispatch to first decode byte). Expiry → 504
	// pd_prefill_timeout.
	PrefillTimeout time.Duration
	// DecodeTimeout bounds decode dispatch → first response byte. Expiry →
	// 504 pd_decode_timeout.
	DecodeTimeout time.Duration
	// StreamIdleTimeout ends a decode relay whose engine has been silent this
	// long (SSE streams are closed with a synthesised [DONE]).
	StreamIdleTimeout time.Duration
	// BodyIdleTimeout ends a non-streaming decode body whose engine has been
	// silent this long (the rule's inactiveTimeOut, as on single pools);
	// 0 → StreamIdleTimeout.
	BodyIdleTimeout time.Duration
	// MaxPrefillResponse caps the buffered prefill/context response; a larger
	// one is treated as a KV-transfer failure (decode recomputes).
	MaxPrefillResponse int64
	// Buffers recycles the legs' prompt-sized body buffers between
	// requests: the process's one pool, which the datapath shares among
	// all its rules. nil: the dialect gets a pool of its own (New), for
	// standalone use such as tests and benchmarks.
	Buffers *bufpool.Pool
	Log     logrus.FieldLogger
}

// DefaultOptions are DefaultTimeouts with no rule cap, and a 1 MiB prefill
// response cap.
func DefaultOptions() Options {
	t := DefaultTimeouts()
	return Options{
		PrefillTimeout:     t.PrefillTimeout,
		DecodeTimeout:      t.DecodeFirstByteTimeout,
		StreamIdleTimeout:  t.StreamIdleTimeout,
		MaxPrefillResponse: 1 << 20,
		Log:                logrus.New(),
	}
}

// withDefaults fills zero fields so a partially set Options is usable.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.PrefillTimeout <= 0 {
		o.PrefillTimeout = d.PrefillTimeout
	}
	if o.DecodeTimeout <= 0 {
		o.DecodeTimeout = d.DecodeTimeout
	}
	if o.StreamIdleTimeout <= 0 {
		o.StreamIdleTimeout = d.StreamIdleTimeout
	}
	if o.BodyIdleTimeout <= 0 {
		o.BodyIdleTimeout = o.StreamIdleTimeout
	}
	if o.MaxPrefillResponse <= 0 {
		o.MaxPrefillResponse = d.MaxPrefillResponse
	}
	if o.Log == nil {
		o.Log = d.Log
	}
	if o.Buffers == nil {
		o.Buffers = bufpool.New(bufpool.DefaultOptions())
	}
	return o
}

// dialects is the one registry of P/D sequences, keyed by kvEngineType.
// llama.cpp has no P/D protocol and is deliberately absent. Read-only.
var dialects = map[spec.Engine]func(Options) Dialect{
	spec.EngineVLLM:   func(o Options) Dialect { return &vllm{opts: o} },
	spec.EngineSGLang: func(o Options) Dialect { return &sglang{opts: o} },
	spec.EngineTRTLLM: func(o Options) Dialect { return &trtllm{opts: o} },
}

// For returns the dialect of engine with DefaultOptions.
func For(engine spec.Engine) (Dialect, bool) { return New(engine, DefaultOptions()) }

// New returns the dialect of engine configured with opts (zero fields take
// their defaults). ok is false for engines without a P/D sequence.
func New(engine spec.Engine, opts Options) (Dialect, bool) {
	mk, ok := dialects[engine]
	if !ok {
		return nil, false
	}
	return mk(opts.withDefaults()), true
}

// logFields are the structured fields of every dialect log line. Bodies and
// transfer objects are never logged.
func logFields(e spec.Engine, req *Request) logrus.Fields {
	f := logrus.Fields{"engine": e, "request_id": req.RequestID}
	if req.Rule != nil {
		f["rule"] = req.Rule.Name
	}
	return f
}

// clientObject parses the client body every dialect rewrites into q.obj; a
// body that is not a JSON object is answered 400 pd_invalid_body naming the
// path, an n that is not a positive integer 400 pd_invalid_n, and one whose
// request_id carries vLLM's peer markers 400 request_id_reserved (SMG's
// moriio_request_id_reserved on a MoRI-IO rule), before
// any leg is sent.
func (q *seq) clientObject() bool {
	obj, err := parseObject(q.req.Body)
	if err != nil {
		q.fail(PhasePrefill, http.StatusBadRequest, CodeInvalidBody,
			"the body of POST "+q.req.Path+" must be a JSON object on a prefill/decode rule")
		return false
	}
	if err := checkN(&obj); err != nil {
		q.fail(PhasePrefill, http.StatusBadRequest, CodeInvalidN, err.Error())
		return false
	}
	if obj.reservedRequestID() {
		q.fail(PhasePrefill, http.StatusBadRequest, RequestIDReservedCode(q.req.Rule), msgRequestIDReserved)
		return false
	}
	q.o.ClientTransferFields = obj.countTransferFields()
	q.obj = obj
	return true
}
