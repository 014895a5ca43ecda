package enginestats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// An engine's context window (vLLM's --max-model-len) is reported by its
// OpenAI server on GET /v1/models as each model card's max_model_len
// (vLLM; SGLang's cards carry it too). The datapath reads it so a P/D rule
// that tokenises prompts can refuse one that fits no leg without being
// told the window (datapath/ctxwindow.go). The read is one small GET per
// endpoint every few minutes, off the request path; what it cannot trust
// it ignores.

// MaxModelLenLimit is the largest window taken from an engine, the bound
// a rule's own max_model_len has: a larger value is not a real model's.
const MaxModelLenLimit = 1 << 24

// maxModelsBody caps a /v1/models answer: a card per model (and LoRA
// adapter) is a few hundred bytes.
const maxModelsBody = 1 << 20

// errNoWindow: the answer names no usable max_model_len.
var errNoWindow = errors.New("no usable max_model_len")

// ParseMaxModelLen is the context window a /v1/models body reports for
// model: the card whose id is model, or, when model is "" or not listed,
// the smallest window of the listed cards (a prompt must fit whichever the
// request names). Windows that are not integers in 1..MaxModelLenLimit are
// ignored; ok is false when none is left.
func ParseMaxModelLen(body []byte, model string) (n int, ok bool) {
	var list struct {
		Data []struct {
			ID          string          `json:"id"`
			MaxModelLen json.RawMessage `json:"max_model_len"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil {
		return 0, false
	}
	for _, c := range list.Data {
		var v int64
		if json.Unmarshal(c.MaxModelLen, &v) != nil || v < 1 || v > MaxModelLenLimit {
			continue
		}
		if model != "" && c.ID == model {
			return int(v), true
		}
		if !ok || int(v) < n {
			n, ok = int(v), true
		}
	}
	return n, ok
}

// FetchMaxModelLen GETs url (an endpoint's /v1/models) with hc and parses
// the window for model (ParseMaxModelLen). hc's timeout and ctx bound it.
func FetchMaxModelLen(ctx context.Context, hc *http.Client, url, model string) (int, error) {
	body, err := getCapped(ctx, hc, url, maxModelsBody)
	if err != nil {
		return 0, fmt.Errorf("models %w", err)
	}
	n, ok := ParseMaxModelLen(body, model)
	if !ok {
		return 0, fmt.Errorf("models %s: %w", url, errNoWindow)
	}
	return n, nil
}
