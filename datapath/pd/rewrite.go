package pd

import (
	"errors"
	"strings"

	"github.com/infergate/infergate/jsonscan"
)

// Wire field names the dialects read or rewrite.
const (
	fieldStream              = "stream"
	fieldStreamOptions       = "stream_options"
	fieldMaxTokens           = "max_tokens"
	fieldMaxCompletionTokens = "max_completion_tokens"
	fieldMinTokens           = "min_tokens"
	fieldN                   = "n"

	// Stop conditions, and vLLM's switch to ignore the end-of-sequence token.
	fieldStop                   = "stop"
	fieldStopTokenIDs           = "stop_token_ids"
	fieldIncludeStopStrInOutput = "include_stop_str_in_output"
	fieldIgnoreEOS              = "ignore_eos"

	// vLLM NIXL connector.
	fieldKVTransferParams = "kv_transfer_params"
	fieldDoRemoteDecode   = "do_remote_decode"
	fieldDoRemotePrefill  = "do_remote_prefill"

	// SGLang bootstrap triple.
	fieldBootstrapHost = "bootstrap_host"
	fieldBootstrapPort = "bootstrap_port"
	fieldBootstrapRoom = "bootstrap_room"

	// TensorRT-LLM disaggregated serving.
	fieldDisaggParams    = "disaggregated_params"
	fieldRequestType     = "request_type"
	fieldDisaggRequestID = "disagg_request_id"

	trtContextOnly    = "context_only"
	trtGenerationOnly = "generation_only"
)

// errNotObject is returned for bodies that are not a single JSON object.
var errNotObject = errors.New("body is not a JSON object")

// member is one top-level key of a JSON object, as byte offsets into the raw
// body. seg is the member's whole segment between separators (surrounding
// whitespace included), so untouched members are copied byte for byte.
type member struct {
	keyStart, keyEnd int // key bytes inside the quotes
	valStart, valEnd int
	segStart, segEnd int
}

// object is a parsed top-level JSON object. Only offsets are kept: the
// body is never decoded into a map, so everything not edited survives
// verbatim (key order, number spelling, escapes, whitespace).
type object struct {
	raw        []byte
	open, end  int // index of '{' and of the closing '}'
	members    []member
	hasEscapes bool // some key contains a backslash escape
}

// parseObject validates raw (exactly what encoding/json accepts) and indexes
// its top-level members in the same single pass. It steps the members
// itself, calling jsonscan's strict scanners for each name and value, rather
// than through jsonscan.Members: it needs each member's whole segment (the
// whitespace and separators around it), and on a 1 KB body the iterator's
// call per member costs about a tenth of the parse.
func parseObject(raw []byte) (object, error) {
	o := object{raw: raw}
	i := skipWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return object{}, errNotObject
	}
	o.open = i
	i++
	segStart := i
	i = skipWS(raw, i)
	if i < len(raw) && raw[i] == '}' {
		o.end = i
		return o, o.trailer(i + 1)
	}
	o.members = make([]member, 0, 16)
	for {
		if i >= len(raw) || raw[i] != '"' {
			return object{}, errInvalidJSON
		}
		m := member{segStart: segStart, keyStart: i + 1}
		end, esc, ok := jsonscan.ScanString(raw, i)
		if !ok {
			return object{}, errInvalidJSON
		}
		o.hasEscapes = o.hasEscapes || esc
		m.keyEnd = end - 1
		i = skipWS(raw, end)
		if i >= len(raw) || raw[i] != ':' {
			return object{}, errInvalidJSON
		}
		m.valStart = skipWS(raw, i+1)
		if m.valEnd, ok = scanValue(raw, m.valStart, 1); !ok {
			return object{}, errInvalidJSON
		}
		i = skipWS(raw, m.valEnd)
		m.segEnd = i
		o.members = append(o.members, m)
		if i >= len(raw) {
			return object{}, errInvalidJSON
		}
		switch raw[i] {
		case '}':
			o.end = i
			return o, o.trailer(i + 1)
		case ',':
			segStart = i + 1
			i = skipWS(raw, i+1)
		default:
			return object{}, errInvalidJSON
		}
	}
}

// trailer accepts only whitespace after the closing brace.
func (o *object) trailer(i int) error {
	if skipWS(o.raw, i) != len(o.raw) {
		return errInvalidJSON
	}
	return nil
}

// errInvalidJSON is returned for bodies encoding/json would reject.
var errInvalidJSON = errors.New("body is not valid JSON")

// skipWS and scanValue are the package's names for the shared scanner's
// whitespace skip and strict value scan (depth counts enclosing containers).
func skipWS(b []byte, i int) int { return jsonscan.SkipSpace(b, i) }

func scanValue(b []byte, i, depth int) (int, bool) { return jsonscan.ScanNested(b, i, depth) }

// keyIs reports whether member m's key equals name, decoding escapes only
// when the body has any (rare: a client spelling "max\u005ftokens").
func (o *object) keyIs(m *member, name string) bool {
	k := o.raw[m.keyStart:m.keyEnd]
	if !o.hasEscapes {
		return string(k) == name
	}
	return jsonscan.Equal(k, name)
}

// lookup returns the value of the last member named name (JSON decoders of
// every engine keep the last duplicate) and whether it exists.
func (o *object) lookup(name string) ([]byte, bool) {
	for i := len(o.members) - 1; i >= 0; i-- {
		if o.keyIs(&o.members[i], name) {
			m := &o.members[i]
			return o.raw[m.valStart:m.valEnd], true
		}
	}
	return nil, false
}

// isTrue reports whether the top-level field is the literal true.
func (o *object) isTrue(name string) bool {
	v, ok := o.lookup(name)
	return ok && string(v) == "true"
}

// edit sets (value != nil) or deletes (value == nil) one top-level key.
// value must be valid JSON.
type edit struct {
	key   string
	value []byte
}

// apply returns a new body with edits applied: a set replaces the value of
// the first occurrence in place (later duplicates are dropped so the engine
// cannot see a stale one) or appends the key before the closing brace; a
// delete drops every occurrence with its separator. Members not named by an
// edit are copied byte for byte. The result is one allocation.
func (o *object) apply(edits []edit) []byte { return o.applyEdits(nil, edits, false) }

// applyOwn is apply for a leg body the gateway owns the transfer state of:
// every client transfer field (transferFields) not set by an edit is
// dropped in the same pass.
func (o *object) applyOwn(edits []edit) []byte { return o.applyEdits(nil, edits, true) }

// applyOwnInto is applyOwn writing into buf's memory when it is large
// enough (one allocation otherwise). A leg body is only read while its leg
// is being sent, so a later leg of the same request can reuse the earlier
// one's buffer: on a 400 KB prompt that saves an allocation, its zeroing
// and its page faults. buf must not overlap o.raw, and nothing may still
// read what buf held.
func (o *object) applyOwnInto(buf []byte, edits []edit) []byte {
	return o.applyEdits(buf, edits, true)
}

// dropMember is match's verdict for a client transfer field applyOwn drops.
const dropMember = -2

func (o *object) applyEdits(buf []byte, edits []edit, own bool) []byte {
	raw := o.raw
	var done uint64 // bit i: edit i matched a member (max 64 edits)
	match := func(m *member) int {
		for j := range edits {
			if o.keyIs(m, edits[j].key) {
				return j
			}
		}
		if own && o.isTransferField(m) {
			return dropMember
		}
		return -1
	}
	// Size pass.
	n := o.open + 1 + len(raw) - o.end
	kept := 0
	var seen uint64
	for i := range o.members {
		m := &o.members[i]
		j := match(m)
		switch {
		case j == dropMember:
			continue
		case j < 0:
		case edits[j].value == nil || seen&(1<<j) != 0:
			continue
		default:
			seen |= 1 << j
			n += len(edits[j].value) - (m.valEnd - m.valStart)
		}
		if kept > 0 {
			n++
		}
		n += m.segEnd - m.segStart
		kept++
	}
	if len(o.members) == 0 {
		n += o.end - (o.open + 1)
	}
	for j := range edits {
		if edits[j].value != nil && seen&(1<<j) == 0 {
			n += 1 + len(edits[j].key) + 2 + 1 + len(edits[j].value) // ,"k":v
		}
	}

	out := buf[:0]
	if cap(out) < n {
		out = make([]byte, 0, n)
	}
	out = append(out, raw[:o.open+1]...)
	kept = 0
	for i := range o.members {
		m := &o.members[i]
		j := match(m)
		if j == dropMember || j >= 0 && (edits[j].value == nil || done&(1<<j) != 0) {
			continue
		}
		if kept > 0 {
			out = append(out, ',')
		}
		kept++
		if j < 0 {
			out = append(out, raw[m.segStart:m.segEnd]...)
			continue
		}
		done |= 1 << j
		out = append(out, raw[m.segStart:m.valStart]...)
		out = append(out, edits[j].value...)
		out = append(out, raw[m.valEnd:m.segEnd]...)
	}
	if len(o.members) == 0 {
		out = append(out, raw[o.open+1:o.end]...)
	}
	for j := range edits {
		if edits[j].value == nil || done&(1<<j) != 0 {
			continue
		}
		if kept > 0 {
			out = append(out, ',')
		}
		kept++
		out = append(out, '"')
		out = append(out, edits[j].key...)
		out = append(out, '"', ':')
		out = append(out, edits[j].value...)
	}
	out = append(out, raw[o.end:]...)
	return out
}

// Literal values the rewriters splice in.
var (
	jsonFalse = []byte("false")
	jsonTrue  = []byte("true")
	jsonOne   = []byte("1")
	// vllmPrefillParams asks a vLLM NIXL prefill to keep its KV blocks for a
	// remote decode.
	vllmPrefillParams = []byte(`{"` + fieldDoRemoteDecode + `":true,"` + fieldDoRemotePrefill + `":false}`)
)

// isChat reports whether path is the chat-completions API, where the cap
// field may be max_completion_tokens.
func isChat(path string) bool {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return strings.HasSuffix(path, "/chat/completions")
}
