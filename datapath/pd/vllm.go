package pd

import (
	"context"
	"net/http"
	"time"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/spec"
)

// vllm is the vLLM NIXL sequence: a one-token prefill that keeps its KV
// blocks, then the client's original request to decode with the prefill's
// kv_transfer_params so decode pulls the blocks instead of recomputing.
type vllm struct{ opts Options }

func (d *vllm) Serve(ctx context.Context, w http.ResponseWriter, req *Request, pair Pair, s upstream.Sender) (o Outcome) {
	start := time.Now()
	o.Engine = spec.EngineVLLM
	defer func() { o.Total = time.Since(start) }()
	log := d.opts.Log.WithFields(logFields(o.Engine, req))

	obj, ok := clientObject(w, &o, req)
	if !ok {
		return o
	}
	suffix := idSuffix(req.RequestID)
	if shape := multiShape(&obj, req.Path); shape != "" {
		// vLLM's transfer is single-consumer: several samples or prompts
		// cannot share one prefill's blocks. Decode computes the prompt.
		o.PrefillSkipped = shape
		body := vllmDecodeBody(&obj, nil)
		one := func(decode spec.Endpoint) upstream.Leg {
			h := legHeader(req.Header)
			h.Set(headerRequestID, suffix)
			return upstream.Leg{Endpoint: decode, Path: req.Path, Header: h, Body: body}
		}
		serveDecode(ctx, w, s, pair.decodes(), one, d.opts, &o, log)
		return o
	}
	prefillBody := vllmPrefillBody(&obj, req.Path)

	build := func(prefill spec.Endpoint) upstream.Leg {
		h := legHeader(req.Header)
		h.Set(headerRequestID, vllmRequestID(prefill, pair.Decode, suffix))
		return upstream.Leg{Endpoint: prefill, Path: req.Path, Header: h, Body: prefillBody}
	}
	r, prefill, ok, done := prefillWithFailover(ctx, w, s, pair, build, d.opts, &o, log,
		prefillWords{leg: "prefill", fallback: "decode recomputes"})
	if done {
		return o
	}
	var params []byte
	if ok {
		params = kvTransferParams(r.body)
		o.KVTransferFailed = params == nil
	}

	body := vllmDecodeBody(&obj, params)
	// The prefill's params name the prefill's blocks, so any decode can
	// pull them; the id names the decode actually sent to.
	buildDecode := func(decode spec.Endpoint) upstream.Leg {
		h := legHeader(req.Header)
		h.Set(headerRequestID, vllmRequestID(prefill, decode, suffix))
		return upstream.Leg{Endpoint: decode, Path: req.Path, Header: h, Body: body}
	}
	serveDecode(ctx, w, s, pair.decodes(), buildDecode, d.opts, &o, log)
	return o
}

// kvTransferParams extracts the prefill response's top-level
// kv_transfer_params object verbatim; nil when absent, null or not an object
// (decode then recomputes).
func kvTransferParams(body []byte) []byte {
	obj, err := parseObject(body)
	if err != nil {
		return nil
	}
	v, ok := obj.lookup(fieldKVTransferParams)
	if !ok || len(v) == 0 || v[0] != '{' {
		return nil
	}
	return v
}
