package datapath

import "encoding/json"

// Model codes of keyed requests (400).
const (
	// CodeModelMismatch: X-Model and the body's "model" name different
	// models. The gateway would check one and the engine serve the other.
	CodeModelMismatch = "model_mismatch"
	// CodeModelUnverifiable: the key has a model allow-list and the body,
	// which streams through unread (multipart, audio, …), names its model
	// where the gateway cannot see it.
	CodeModelUnverifiable = "model_unverifiable"
)

// requestModel is the one model a request names, for a key's allow-list:
// the body's "model" (what the engine serves) and the X-Model header must
// agree when both are given; either alone is the model. ok is false when
// they disagree. A body "model" that is not a string names no model here
// (the engine refuses it).
func requestModel(header string, bodyModel json.RawMessage) (model string, ok bool) {
	b := jsonString(bodyModel)
	switch {
	case b == "":
		return header, true
	case header == "" || header == b:
		return b, true
	}
	return "", false
}

// sameValues reports whether a header's values (all of its lines) are one
// value repeated, so a check of the first sees every one.
func sameValues(vs []string) bool {
	for _, v := range vs[min(1, len(vs)):] {
		if v != vs[0] {
			return false
		}
	}
	return true
}
