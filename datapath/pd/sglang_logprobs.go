package pd

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// SGLang computes a prompt's input logprobs on the prefill; the decode
// returns only its own tokens'. SGLang's router therefore waits, for a
// request that asks for logprobs, for the prefill's body as well as the
// decode's and answers the decode's with the prefill's
// meta_info.input_token_logprobs prepended to its own. infergate does the
// same: a non-streamed decode body is merged whole (mergeDecode); a
// streamed decode waits for the prefill's body before its first byte is
// relayed, then every event carrying the array gets the prefill's
// prepended (sglang_logprobs_stream.go). The prefill finishes as soon as
// its decode has joined the room, so the wait is short. A prefill that
// failed, or bodies without the arrays, leave the decode's answer as it is.

// Wire names of the logprob fields.
const (
	fieldReturnLogprob      = "return_logprob" // SGLang's native request flag
	fieldLogprobs           = "logprobs"       // OpenAI: true (chat) or a count (completions)
	fieldTopLogprobs        = "top_logprobs"
	fieldMetaInfo           = "meta_info"
	fieldInputTokenLogprobs = "input_token_logprobs"
)

// maxMergedDecodeResponse bounds a non-streamed decode body held for the
// merge.
const maxMergedDecodeResponse = 64 << 20

// wantsLogprobs reports a request that asks for logprobs: return_logprob
// true, logprobs true or a count above 0, or top_logprobs above 0.
func wantsLogprobs(o *object) bool {
	if o.isTrue(fieldReturnLogprob) || o.isTrue(fieldLogprobs) {
		return true
	}
	for _, f := range []string{fieldLogprobs, fieldTopLogprobs} {
		if v, ok := o.lookup(f); ok {
			if n, isInt := jsonInt(v); isInt && n > 0 {
				return true
			}
		}
	}
	return false
}

// mergeInputLogprobs returns decode with the prefill's
// meta_info.input_token_logprobs prepended to its own; ok is false (and
// decode should be sent as it is) when either body lacks the array.
func mergeInputLogprobs(prefill, decode []byte) ([]byte, bool) {
	_, _, pa, ok := inputLogprobs(prefill)
	if !ok {
		return nil, false
	}
	pe, ok := arrayElems(pa)
	if !ok {
		return nil, false
	}
	return prependInputLogprobs(pe, decode)
}

// prependInputLogprobs returns decode with the array elements pe prepended
// to its meta_info.input_token_logprobs; ok is false when decode lacks the
// array.
func prependInputLogprobs(pe, decode []byte) ([]byte, bool) {
	dobj, meta, da, ok := inputLogprobs(decode)
	if !ok {
		return nil, false
	}
	de, dok := arrayElems(da)
	if !dok {
		return nil, false
	}
	merged := make([]byte, 0, len(pe)+len(de)+3)
	merged = append(merged, '[')
	merged = append(merged, pe...)
	if len(pe) > 0 && len(de) > 0 {
		merged = append(merged, ',')
	}
	merged = append(merged, de...)
	merged = append(merged, ']')
	newMeta := meta.apply([]edit{{fieldInputTokenLogprobs, merged}})
	return dobj.apply([]edit{{fieldMetaInfo, newMeta}}), true
}

// inputLogprobs finds body's meta_info.input_token_logprobs array; obj and
// meta are the parsed body and meta_info, to rewrite it in place.
func inputLogprobs(body []byte) (obj, meta object, a []byte, ok bool) {
	obj, err := parseObject(body)
	if err != nil {
		return obj, meta, nil, false
	}
	m, ok := obj.lookup(fieldMetaInfo)
	if !ok {
		return obj, meta, nil, false
	}
	if meta, err = parseObject(m); err != nil {
		return obj, meta, nil, false
	}
	a, ok = meta.lookup(fieldInputTokenLogprobs)
	return obj, meta, a, ok && len(a) > 0 && a[0] == '['
}

// arrayElems is the inside of a JSON array (between the brackets, trimmed).
func arrayElems(a []byte) ([]byte, bool) {
	if len(a) < 2 || a[0] != '[' || a[len(a)-1] != ']' {
		return nil, false
	}
	in := a[1 : len(a)-1]
	i, j := skipWS(in, 0), len(in)
	for j > i && (in[j-1] == ' ' || in[j-1] == '\n' || in[j-1] == '\t' || in[j-1] == '\r') {
		j--
	}
	return in[i:j], true
}

// mergeDecode answers a non-streamed decode 200 of a logprobs request: the
// whole decode body, then the prefill's body (already in pres, or awaited
// on prefCh up to PrefillTimeout), merged when both carry input logprobs.
// It returns the prefill result if it consumed it from prefCh.
func (q sgSeq) mergeDecode(ctx context.Context, p peek, pres *sgPrefill, prefCh <-chan sgPrefill) (*sgPrefill, relayResult) {
	resp := p.resp
	defer resp.Body.Close()
	rest, err := readCapped(resp.Body, maxMergedDecodeResponse)
	if err != nil {
		if ctx.Err() != nil {
			return pres, relayResult{clientGone: true}
		}
		return pres, relayResult{cut: true}
	}
	body := append(append(make([]byte, 0, len(p.first)+len(rest)), p.first...), rest...)
	pres, gone := q.awaitPrefill(ctx, pres, prefCh)
	if gone {
		return pres, relayResult{clientGone: true}
	}
	out := body
	if pres != nil && pres.err == nil && pres.status == http.StatusOK {
		if m, ok := mergeInputLogprobs(pres.body, body); ok {
			out = m
		}
	}
	copyResponseHeader(q.w.Header(), resp.Header)
	q.w.Header().Set("Content-Type", "application/json")
	q.w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	q.w.WriteHeader(resp.StatusCode)
	if _, err := q.w.Write(out); err != nil {
		return pres, relayResult{clientGone: true}
	}
	return pres, relayResult{}
}

// awaitPrefill is the prefill's result for a merge: pres when already
// known, else what arrives on prefCh within PrefillTimeout (nil when it
// does not). gone reports that the client left while waiting.
func (q sgSeq) awaitPrefill(ctx context.Context, pres *sgPrefill, prefCh <-chan sgPrefill) (_ *sgPrefill, gone bool) {
	if pres != nil {
		return pres, false
	}
	t := time.NewTimer(q.opts.PrefillTimeout)
	defer t.Stop()
	select {
	case r := <-prefCh:
		return &r, false
	case <-t.C:
		return nil, false
	case <-ctx.Done():
		return nil, true
	}
}
