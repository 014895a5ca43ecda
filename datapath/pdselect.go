package datapath

import (
	"net/http"
	"time"

	"github.com/infergate/infergate/datapath/ladder"
)

// The P/D pair choice, shared by the proxy (servePD) and the endpoint
// picker (epppick.go): both run the same ladder over the same candidates
// and claim the same breaker slots, so a request picked over ext_proc is
// indistinguishable, for affinity and load, from one the datapath served.

// pdFacts are what the P/D ladder keys on for one request: the model and
// session key (requestIdentity) and, when Tier 1 is on, the prompt key.
func (rt *Runtime) pdFacts(c *compiled, r *http.Request, body []byte) ladder.Facts {
	f := ladder.Facts{Ctx: r.Context(), Path: r.URL.Path, Body: body, Now: time.Now()}
	top := ladder.ScanFacts(&f)
	f.Model, f.SessionKey = requestIdentity(r.Header, top)
	if c.pd.prefix != nil {
		limit := rt.opts.PrefixIndex.MaxKeyBytes
		buf := c.pd.keys.Get(promptKeyRoom(top, limit))
		if f.PromptKey = top.AppendPromptKey(buf, f.Path, limit); f.PromptKey == nil {
			// No key (no prompt for this path, or one the index cannot
			// key): nothing will release the buffer, so it goes back now.
			c.pd.keys.Put(buf)
		}
	}
	return f
}

// promptKeyRoom is the capacity a prompt key is built in: the raw prompt's
// length, escapes included (the key is never longer than the text it
// decodes), capped at limit (≤ 0: none).
func promptKeyRoom(top ladder.BodyFields, limit int) int {
	n := len(top.Prompt) + len(top.Messages)
	if limit > 0 {
		n = min(n, limit)
	}
	return n
}

// releaseFacts gives f's prompt key back to the generation's pool once the
// request is served: the prefix index keeps only hashes of it, and nothing
// else outlives the request with it.
func (c *compiled) releaseFacts(f *ladder.Facts) {
	c.pd.keys.Put(f.PromptKey)
	f.PromptKey = nil
}

// pairChoice is a chosen (prefill, decode) pair whose breaker slots are
// claimed, with the candidate lists it was chosen from (the alternates a
// dialect or a proxy may fail over to).
type pairChoice struct {
	tr                ladder.Trace
	prefills, decodes []ladder.Candidate
}

// choosePair runs the ladder over the usable endpoints outside excl until
// it finds a pair that may work together (pairCheck) and whose breakers
// both admit it. ok is false when no pair is left; pairDiff then says why
// the last incompatible pair was refused ("" when none was).
func (c *compiled) choosePair(f *ladder.Facts, excl uint64) (pc pairChoice, pairDiff string, ok bool) {
	for range len(c.eps) + 1 {
		if c.pd.dialect == nil {
			break
		}
		prefills, decodes := c.pdCandidates(excl)
		tr, found := c.pd.ladder.SelectPair(f, prefills, decodes)
		if !found {
			break
		}
		pi, di := tr.Prefill.Index, tr.Decode.Index
		if diff := c.pairCheck(pi, di, decodes, &excl); diff != "" { // pdpair.go
			pairDiff = diff
			continue
		}
		if !c.admitPD(pi) {
			excl |= bit(pi)
			continue
		}
		if !c.admitPD(di) {
			c.abandonTrial(pi)
			excl |= bit(di)
			continue
		}
		return pairChoice{tr: tr, prefills: prefills, decodes: decodes}, pairDiff, true
	}
	return pairChoice{}, pairDiff, false
}
