package pd

import (
	"context"
	"net/http"
	"time"

	"github.com/infergate/infergate/datapath/spec"
	"github.com/sirupsen/logrus"
)

// vllm is the vLLM NIXL sequence: a one-token prefill that keeps its KV
// blocks, then the client's original request to decode with the prefill's
// kv_transfer_params so decode pulls the blocks instead of recomputing.
type vllm struct{ opts Options }

func (d *vllm) Serve(ctx context.Context, w http.ResponseWriter, req *Request, pair Pair, s Sender) (o Outcome) {
	start := time.Now()
	o.Engine = spec.EngineVLLM
	defer func() { o.Total = time.Since(start) }()
	log := d.opts.Log.WithFields(logFields(o.Engine, req))

	obj, err := parseObject(req.Body)
	if err != nil {
		writeError(w, &o, PhasePrefill, http.StatusBadRequest, CodeInvalidBody, "request body must be a JSON object")
		return o
	}
	prefillBody := vllmPrefillBody(&obj, req.Path)
	suffix := idSuffix(req.RequestID)

	var params []byte
	prefill := pair.Prefill
	for attempt := 0; ; attempt++ {
		h := legHeader(req.Header)
		h.Set(headerRequestID, vllmRequestID(prefill, pair.Decode, suffix))
		r := runPrefill(ctx, s, Leg{Endpoint: prefill, Path: req.Path, Header: h, Body: prefillBody}, d.opts)
		o.leg(r.leg)
		o.Prefill = r.leg.Duration
		switch {
		case r.leg.Cancelled:
			clientGone(&o, PhasePrefill)
			return o
		case r.leg.TimedOut:
			writeError(w, &o, PhasePrefill, http.StatusGatewayTimeout, CodePrefillTimeout, "prefill did not complete in time")
			return o
		case r.leg.Err == nil && r.leg.Status >= 400 && r.leg.Status < 500:
			// The decode would reject the same request: tell the client now.
			writeBuffered(w, r.leg.Status, r.header, r.body)
			o.Status, o.Relayed, o.FailedPhase = r.leg.Status, true, PhasePrefill
			return o
		case r.overflow:
			o.KVTransferFailed = true
		case !shouldRetryPrefill(r.leg):
			params = kvTransferParams(r.body)
			o.KVTransferFailed = params == nil
		case attempt == 0 && len(pair.AltPrefill) > 0:
			log.WithFields(logrus.Fields{"endpoint": prefill.ID, "status": r.leg.Status, "error": r.leg.Err}).Warn("pd: prefill failed, retrying on another prefill")
			prefill = pair.AltPrefill[0]
			o.PrefillFailover = true
			continue
		default:
			log.WithFields(logrus.Fields{"endpoint": prefill.ID, "status": r.leg.Status, "error": r.leg.Err}).Warn("pd: prefill failed, decode recomputes")
			o.KVTransferFailed = true
		}
		break
	}

	h := legHeader(req.Header)
	h.Set(headerRequestID, vllmRequestID(prefill, pair.Decode, suffix))
	leg := Leg{Endpoint: pair.Decode, Path: req.Path, Header: h, Body: vllmDecodeBody(&obj, params)}
	serveDecode(ctx, w, s, leg, d.opts, &o, log)
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
