package bpe

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// gpt2Pattern is the ByteLevel pre-tokenizer's own regex (use_regex).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// wordCacheLimit and wordCacheBytes bound the per-tokenizer cache of
// pre-tokenized words, by count and by the text and ids held (a "word" of
// a script written without spaces can be a whole paragraph); the cache is
// cleared when either is reached. A word above wordCacheBytes/16 is not
// cached at all: one huge word must not flush everyone's.
const (
	wordCacheLimit = 1 << 16
	wordCacheBytes = 16 << 20
)

// The segment cache keeps the ids of whole segments (the text between two
// added tokens: in a chat, one message with its role). Prompts repeat
// segments — a shared system prompt, a conversation's history resent every
// turn — and a segment's ids depend on nothing but its text, so a repeated
// one costs a hash lookup instead of its pre-tokenization and merges.
// Segments shorter than segmentCacheMin are left to the word cache.
//
// A segment seen once waits in a trial area of its own (Options.
// SegmentTrialBytes, cleared when full) and moves to the segment cache
// proper (Options.SegmentCacheBytes) on its second sighting. So a user's
// one-off questions only ever flush each other, while a conversation's
// turn is encoded once: the next turn, which resends it, finds its ids in
// the trial area instead of encoding it a second time.
//
// The segment cache evicts, it is never cleared: a client can get any
// segment promoted by sending it twice, and a cache cleared when full let
// a flood of such segments flush every tenant's system prompts. Eviction
// is a CLOCK over the promotion order (as S3-FIFO's main queue): each hit
// raises a segment's use count, at most segmentUsesMax; the hand takes the
// oldest segment, evicts it if its count is zero, else lowers the count
// and puts it back at the end. A promoted segment starts at zero, so a
// flood's segments go before any segment still in use: one used once per
// turn of the cache (its size in segments, promotions) stays, however many
// segments the flood promotes.
const segmentCacheMin = 256

// segmentUsesMax caps a cached segment's use count: a segment hit a
// million times survives as many turns of the clock without a hit as one
// hit thrice, so a prompt that stops being used leaves in bounded time.
const segmentUsesMax = 3

// Options bounds the memory a Tokenizer's caches hold (text and ids). A
// zero field takes its DefaultOptions value.
type Options struct {
	// SegmentCacheBytes bounds the segments seen at least twice. One
	// segment larger than a sixteenth of it is never cached: one huge
	// prompt must not flush everyone's.
	SegmentCacheBytes int
	// SegmentTrialBytes bounds the segments seen once, kept until their
	// second sighting (or until the area fills and is cleared). Every
	// segment passes through it, so one larger than it is never cached.
	SegmentTrialBytes int
}

// Defaults of Options: 16 MiB holds about a thousand 4,000-token system
// prompts; 4 MiB of segments seen once covers the turns of the
// conversations active in the last few seconds at hundreds of requests
// per second (a turn and its reply are a few KB).
const (
	DefaultSegmentCacheBytes = 16 << 20
	DefaultSegmentTrialBytes = 4 << 20
)

// DefaultOptions returns the cache bounds a Tokenizer loads with.
func DefaultOptions() Options {
	return Options{SegmentCacheBytes: DefaultSegmentCacheBytes, SegmentTrialBytes: DefaultSegmentTrialBytes}
}

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.SegmentCacheBytes <= 0 {
		o.SegmentCacheBytes = d.SegmentCacheBytes
	}
	if o.SegmentTrialBytes <= 0 {
		o.SegmentTrialBytes = d.SegmentTrialBytes
	}
	return o
}

// Tokenizer is one loaded tokenizer.json. It is immutable after Load and
// safe for concurrent use.
type Tokenizer struct {
	vocab        map[string]uint32
	byteIDs      [256]uint32
	merges       map[uint64]merge // left<<32 | right
	ignoreMerges bool
	added        []addedToken
	addedFirst   [256][]int // added token indices by first byte, longest first
	addedLead    string     // the distinct first bytes of the added tokens
	addedByText  map[string]uint32
	nfc          bool
	steps        []preStep
	// prefix and suffix are the post-processor's special tokens around a
	// single sequence (add_special_tokens).
	prefix, suffix []uint32
	sum            string

	cacheMu    sync.RWMutex
	cache      map[string][]uint32
	cacheBytes int // text and ids held in cache

	opts       Options
	segMu      sync.RWMutex
	segs       map[string]segment // segments seen at least twice
	segClock   segmentRing        // segs' keys in promotion order: the eviction clock
	segBytes   int                // text and ids held in segs
	trial      map[string]segment // segments seen once
	trialBytes int                // text and ids held in trial
}

// segment is a cached segment's ids, the key's own copy of its text (so
// the promotion to the segment cache does not copy it again) and, once
// promoted, the hits since the eviction clock last passed it (at most
// segmentUsesMax). Hits raise uses under the read lock, so it is atomic;
// the clock lowers it under the write lock. All three share one
// allocation (cloneSegment).
type segment struct {
	text string
	ids  []uint32
	uses *atomic.Uint32
}

// hit records a use of a cached segment. The hot prompts every request
// shares are already at the cap: they are only read, so the cores serving
// them do not pass one cache line back and forth.
func (e segment) hit() {
	if u := e.uses.Load(); u < segmentUsesMax {
		e.uses.CompareAndSwap(u, u+1)
	}
}

// segmentRing is a FIFO of cached segments' keys in a ring buffer that
// grows by doubling. The segment cache's byte bound bounds its length (a
// segment holds at least segmentCacheMin bytes), so it never shrinks.
type segmentRing struct {
	buf        []string
	head, size int
}

func (r *segmentRing) push(key string) {
	if r.size == len(r.buf) {
		grown := make([]string, max(64, 2*len(r.buf)))
		n := copy(grown, r.buf[r.head:])
		copy(grown[n:], r.buf[:r.head])
		r.buf, r.head = grown, 0
	}
	r.buf[(r.head+r.size)%len(r.buf)] = key
	r.size++
}

func (r *segmentRing) pop() string {
	key := r.buf[r.head]
	r.buf[r.head] = "" // an evicted segment's memory is not held here
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return key
}

type merge struct {
	rank int32
	id   uint32
}

type addedToken struct {
	text string
	id   uint32
}

// preStep is one pre-tokenizer stage: a regex split (Isolated), and/or
// ByteLevel's prefix space.
type preStep struct {
	re          *regexp2.Regexp // nil: no split
	sc          *scanner        // the same split, hand-written (known patterns)
	matchesOnly bool            // behavior Removed + invert: gaps are dropped
	prefixSpace bool
}

// Wire shape of the parts of tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens []struct {
		ID      uint32 `json:"id"`
		Content string `json:"content"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type                    string            `json:"type"`
		Vocab                   map[string]uint32 `json:"vocab"`
		Merges                  []json.RawMessage `json:"merges"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Dropout                 *float64          `json:"dropout"`
		ByteFallback            bool              `json:"byte_fallback"`
		ContinuingSubwordPrefix string            `json:"continuing_subword_prefix"`
		EndOfWordSuffix         string            `json:"end_of_word_suffix"`
	} `json:"model"`
}

type component struct {
	Type string `json:"type"`
	// Sequence members: normalizers, pretokenizers, processors.
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	// Split.
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
	// ByteLevel.
	AddPrefixSpace bool  `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// TemplateProcessing.
	Single        []map[string]json.RawMessage `json:"single"`
	SpecialTokens map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
}

// LoadFile reads a tokenizer.json, or a gzipped one (name ending in .gz),
// with the default cache bounds.
func LoadFile(path string) (*Tokenizer, error) { return LoadFileWith(path, DefaultOptions()) }

// LoadFileWith is LoadFile with the cache bounds of o.
func LoadFileWith(path string, o Options) (*Tokenizer, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bpe: %w", err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("bpe: %s: %w", path, err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("bpe: %s: %w", path, err)
		}
	}
	t, err := LoadWith(raw, o)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return t, nil
}

// Load parses tokenizer.json bytes, with the default cache bounds.
func Load(raw []byte) (*Tokenizer, error) { return LoadWith(raw, DefaultOptions()) }

// LoadWith is Load with the cache bounds of o.
func LoadWith(raw []byte, o Options) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("bpe: tokenizer.json: %w", err)
	}
	m := f.Model
	switch {
	case m.Type != "BPE":
		return nil, fmt.Errorf("bpe: model type %q is not supported (byte-level BPE only)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0, m.ByteFallback, m.ContinuingSubwordPrefix != "", m.EndOfWordSuffix != "":
		return nil, errors.New("bpe: BPE dropout, byte_fallback and subword affixes are not supported (not a byte-level BPE)")
	case len(m.Vocab) == 0:
		return nil, errors.New("bpe: empty vocab")
	}
	sum := sha256.Sum256(raw)
	t := &Tokenizer{vocab: m.Vocab, ignoreMerges: m.IgnoreMerges, merges: make(map[uint64]merge, len(m.Merges)),
		addedByText: map[string]uint32{}, cache: map[string][]uint32{}, opts: o.withDefaults(), segs: map[string]segment{},
		trial: map[string]segment{}, sum: hex.EncodeToString(sum[:])}
	for b := 0; b < 256; b++ {
		id, ok := m.Vocab[string(byteLevel[b])]
		if !ok {
			return nil, fmt.Errorf("bpe: vocab lacks the byte-level symbol of byte %#x (not a byte-level BPE)", b)
		}
		t.byteIDs[b] = id
	}
	for rank, rm := range m.Merges {
		a, b, err := parseMerge(rm)
		if err != nil {
			return nil, fmt.Errorf("bpe: merges[%d]: %w", rank, err)
		}
		ia, oka := m.Vocab[a]
		ib, okb := m.Vocab[b]
		im, okm := m.Vocab[a+b]
		if !oka || !okb || !okm {
			return nil, fmt.Errorf("bpe: merges[%d] %q %q: symbol not in vocab", rank, a, b)
		}
		k := uint64(ia)<<32 | uint64(ib)
		if _, dup := t.merges[k]; !dup {
			t.merges[k] = merge{rank: int32(rank), id: im}
		}
	}
	for _, a := range f.AddedTokens {
		if a.Content == "" {
			continue
		}
		t.addedByText[a.Content] = a.ID
		t.added = append(t.added, addedToken{text: a.Content, id: a.ID})
	}
	for i, a := range t.added {
		t.addedFirst[a.text[0]] = append(t.addedFirst[a.text[0]], i)
	}
	for b := range t.addedFirst {
		l := t.addedFirst[b]
		sort.SliceStable(l, func(i, j int) bool { return len(t.added[l[i]].text) > len(t.added[l[j]].text) })
		if len(l) > 0 {
			t.addedLead += string([]byte{byte(b)})
		}
	}
	var err error
	if t.nfc, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.steps, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.prefix, t.suffix, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	return t, nil
}

func parseMerge(rm json.RawMessage) (a, b string, err error) {
	var s string
	if json.Unmarshal(rm, &s) == nil {
		var ok bool
		if a, b, ok = strings.Cut(s, " "); !ok {
			return "", "", fmt.Errorf("merge %q has no space", s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(rm, &pair); err != nil || len(pair) != 2 {
		return "", "", fmt.Errorf("merge %s is neither \"a b\" nor [a, b]", rm)
	}
	return pair[0], pair[1], nil
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// parseNormalizer accepts null, NFC and Sequences of NFC.
func parseNormalizer(raw json.RawMessage) (nfc bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return false, fmt.Errorf("bpe: normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return true, nil
	case "Sequence":
		for _, n := range c.Normalizers {
			v, err := parseNormalizer(n)
			if err != nil {
				return false, err
			}
			nfc = nfc || v
		}
		return nfc, nil
	}
	return false, fmt.Errorf("bpe: normalizer %q is not supported", c.Type)
}

func parsePreTokenizer(raw json.RawMessage) ([]preStep, error) {
	if isNull(raw) {
		return nil, errors.New("bpe: no pre_tokenizer: not a byte-level BPE")
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("bpe: pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		var out []preStep
		for _, p := range c.Pretokenizers {
			s, err := parsePreTokenizer(p)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case "Split":
		// Isolated keeps matches and gaps as pieces; Removed with invert
		// (GPT-4o style files) keeps the matches and drops the gaps.
		isolated := c.Behavior == "Isolated" && !c.Invert
		matchesOnly := c.Behavior == "Removed" && c.Invert
		if !isolated && !matchesOnly {
			return nil, fmt.Errorf("bpe: Split behavior %q invert %v is not supported (Isolated, or Removed inverted)", c.Behavior, c.Invert)
		}
		var pat string
		switch {
		case c.Pattern.Regex != nil:
			pat = *c.Pattern.Regex
		case c.Pattern.String != nil:
			pat = regexp2.Escape(*c.Pattern.String)
		default:
			return nil, errors.New("bpe: Split without a pattern")
		}
		re, err := compile(pat)
		if err != nil {
			return nil, err
		}
		st := preStep{re: re, matchesOnly: matchesOnly}
		if sc, ok := scannerFor(pat); ok && !matchesOnly {
			st.sc = &sc
		}
		return []preStep{st}, nil
	case "ByteLevel":
		s := preStep{prefixSpace: c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			re, err := compile(gpt2Pattern)
			if err != nil {
				return nil, err
			}
			s.re = re
		}
		return []preStep{s}, nil
	}
	return nil, fmt.Errorf("bpe: pre_tokenizer %q is not supported", c.Type)
}

func compile(pat string) (*regexp2.Regexp, error) {
	re, err := regexp2.Compile(pat, regexp2.Unicode)
	if err != nil {
		return nil, fmt.Errorf("bpe: pre-tokenizer pattern %q: %w", pat, err)
	}
	return re, nil
}

func parsePostProcessor(raw json.RawMessage) (prefix, suffix []uint32, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, nil, fmt.Errorf("bpe: post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil, nil, nil // offsets only
	case "Sequence":
		for _, p := range c.Processors {
			pre, suf, err := parsePostProcessor(p)
			if err != nil {
				return nil, nil, err
			}
			prefix, suffix = append(prefix, pre...), append(suffix, suf...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		seen := false
		for _, item := range c.Single {
			switch {
			case item["Sequence"] != nil:
				seen = true
			case item["SpecialToken"] != nil:
				var st struct {
					ID string `json:"id"`
				}
				if err := json.Unmarshal(item["SpecialToken"], &st); err != nil {
					return nil, nil, fmt.Errorf("bpe: TemplateProcessing: %w", err)
				}
				ids := c.SpecialTokens[st.ID].IDs
				if len(ids) == 0 {
					return nil, nil, fmt.Errorf("bpe: TemplateProcessing names unknown special token %q", st.ID)
				}
				if seen {
					suffix = append(suffix, ids...)
				} else {
					prefix = append(prefix, ids...)
				}
			}
		}
		return prefix, suffix, nil
	}
	return nil, nil, fmt.Errorf("bpe: post_processor %q is not supported", c.Type)
}

// Options returns the cache bounds the tokenizer was loaded with (zero
// fields filled with their defaults).
func (t *Tokenizer) Options() Options { return t.opts }

// SHA256 is the hex SHA-256 of the tokenizer.json bytes: pin it to the
// engine's revision (a different file shifts ids).
func (t *Tokenizer) SHA256() string { return t.sum }

// TokenID returns the id of an added token's text (e.g. "<|im_end|>").
func (t *Tokenizer) TokenID(text string) (uint32, bool) {
	id, ok := t.addedByText[text]
	return id, ok
}

// Encode returns the token ids of text. addSpecial adds the
// post-processor's special tokens (the BOS of Llama 3 style files), as
// vLLM does for completions (add_special_tokens, default true) and not for
// rendered chats. It keeps no reference to text (its caches hold copies),
// so text may be a reused buffer's bytes (EncodeChat).
//
// The ids are collected in a reused buffer and returned in a slice of
// their exact length: a guess from the text's length is either too large
// (English runs about four bytes a token: a third of the length wasted a
// quarter of every request's ids) or too small (CJK text, a token per
// three bytes or fewer, would double the slice and copy it).
func (t *Tokenizer) Encode(text string, addSpecial bool) []uint32 {
	bp, _ := idBufs.Get().(*[]uint32)
	if bp == nil {
		bp = new([]uint32)
	}
	ids := (*bp)[:0]
	if addSpecial {
		ids = append(ids, t.prefix...)
	}
	ids = t.AppendEncode(ids, text)
	if addSpecial {
		ids = append(ids, t.suffix...)
	}
	out := append(make([]uint32, 0, len(ids)), ids...)
	if cap(ids) <= idBufMax {
		*bp = ids
		idBufs.Put(bp)
	}
	return out
}

// idBufs holds Encode's id buffers between calls; one grown past idBufMax
// ids (a long-context prompt) is left to the collector rather than kept.
var idBufs sync.Pool

const idBufMax = 64 << 10

// AppendEncode appends the ids of text (no special tokens added) to dst.
func (t *Tokenizer) AppendEncode(dst []uint32, text string) []uint32 {
	start := 0
	for i := t.nextAdded(text, 0); i < len(text); i = t.nextAdded(text, i) {
		if a, ok := t.matchAdded(text[i:], t.addedFirst[text[i]]); ok {
			dst = t.appendSegment(dst, text[start:i])
			dst = append(dst, a.id)
			i += len(a.text)
			start = i
			continue
		}
		i++
	}
	return t.appendSegment(dst, text[start:])
}

// nextAdded is the offset of the first byte of text at or after i that
// starts some added token (len(text) when none does). Added tokens usually
// share one first byte ('<'): then the search is strings.IndexByte's
// vectorised scan, not a table lookup per byte of a long prompt.
func (t *Tokenizer) nextAdded(text string, i int) int {
	if len(t.addedLead) == 1 {
		if j := strings.IndexByte(text[i:], t.addedLead[0]); j >= 0 {
			return i + j
		}
		return len(text)
	}
	for i < len(text) && len(t.addedFirst[text[i]]) == 0 {
		i++
	}
	return i
}

func (t *Tokenizer) matchAdded(s string, cands []int) (addedToken, bool) {
	for _, c := range cands {
		if a := t.added[c]; strings.HasPrefix(s, a.text) {
			return a, true
		}
	}
	return addedToken{}, false
}

// appendSegment tokenises text between added tokens, from the segment
// cache or its trial area when it has been seen.
func (t *Tokenizer) appendSegment(dst []uint32, seg string) []uint32 {
	if len(seg) < segmentCacheMin {
		return t.encodeSegment(dst, seg)
	}
	t.segMu.RLock()
	c, cached := t.segs[seg]
	var tried segment
	var seen bool
	if cached {
		c.hit()
	} else {
		tried, seen = t.trial[seg]
	}
	t.segMu.RUnlock()
	// Cached ids are never written once stored, so they are read outside
	// the lock (an evicted segment's ids stay valid for who holds them).
	switch {
	case cached:
		return append(dst, c.ids...)
	case seen:
		t.promote(tried)
		return append(dst, tried.ids...)
	}
	n := len(dst)
	dst = t.encodeSegment(dst, seg)
	t.admit(seg, dst[n:])
	return dst
}

// segmentSize is what a cached segment holds: its text, its ids and its
// use count.
func segmentSize(text string, ids []uint32) int { return len(text) + 4*len(ids) + 4 }

// admit keeps the ids of a segment seen for the first time in the trial
// area (copies of both: seg is a slice of the caller's text, ids of its
// buffer), clearing the area first when it is full.
func (t *Tokenizer) admit(seg string, ids []uint32) {
	size := segmentSize(seg, ids)
	if size > t.opts.SegmentCacheBytes/16 || size > t.opts.SegmentTrialBytes {
		return // one huge prompt must not flush everyone's segments
	}
	e := cloneSegment(seg, ids)
	t.segMu.Lock()
	defer t.segMu.Unlock()
	if _, held := t.segs[seg]; held {
		return // another request encoded it meanwhile
	}
	if _, held := t.trial[seg]; held {
		return
	}
	if t.trialBytes+size > t.opts.SegmentTrialBytes {
		clear(t.trial)
		t.trialBytes = 0
	}
	t.trial[e.text] = e
	t.trialBytes += size
}

// cloneSegment copies a segment's text and ids into one allocation (the
// use count, the ids, then the text's bytes): a segment seen once is the
// common case — every request's new turn — so its copy costs one
// allocation, not two, and its promotion none. The text is a string over
// the tail of the array, which nothing writes once it is cached.
func cloneSegment(seg string, ids []uint32) segment {
	buf := make([]uint32, 1+len(ids)+(len(seg)+3)/4)
	copy(buf[1:], ids)
	text := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf[1+len(ids):]))), len(seg))
	copy(text, seg)
	return segment{
		text: unsafe.String(unsafe.SliceData(text), len(seg)),
		ids:  buf[1 : 1+len(ids) : 1+len(ids)],
		uses: (*atomic.Uint32)(unsafe.Pointer(&buf[0])),
	}
}

// promote moves a segment seen again from the trial area to the segment
// cache, evicting what the clock picks until it fits.
func (t *Tokenizer) promote(e segment) {
	size := segmentSize(e.text, e.ids)
	t.segMu.Lock()
	defer t.segMu.Unlock()
	if _, held := t.trial[e.text]; !held {
		return // promoted by another request, or cleared
	}
	delete(t.trial, e.text)
	t.trialBytes -= size
	t.evictSegments(t.opts.SegmentCacheBytes - size)
	t.segs[e.text] = e
	t.segClock.push(e.text)
	t.segBytes += size
}

// evictSegments turns the clock until the segment cache holds at most
// limit bytes: the oldest segment goes if it has not been used since the
// clock last passed it, else it loses a use and goes to the back. Each
// turn evicts a segment or takes a use away, so the loop ends within
// (segmentUsesMax+1) × the number of segments. Called with segMu held.
func (t *Tokenizer) evictSegments(limit int) {
	for t.segBytes > limit && t.segClock.size > 0 {
		key := t.segClock.pop()
		e := t.segs[key]
		if u := e.uses.Load(); u > 0 {
			e.uses.Store(u - 1)
			t.segClock.push(key)
			continue
		}
		delete(t.segs, key)
		t.segBytes -= segmentSize(e.text, e.ids)
	}
}

// encodeSegment tokenises text between added tokens: normalise,
// pre-tokenise, byte-level BPE per piece.
func (t *Tokenizer) encodeSegment(dst []uint32, seg string) []uint32 {
	if seg == "" {
		return dst
	}
	if t.nfc && !isASCII(seg) && !norm.NFC.IsNormalString(seg) {
		seg = norm.NFC.String(seg)
	}
	pieces := []string{seg}
	for si, st := range t.steps {
		if st.prefixSpace {
			for i, p := range pieces {
				if !strings.HasPrefix(p, " ") {
					pieces[i] = " " + p
				}
			}
		}
		switch {
		case st.sc != nil && inert(t.steps[si+1:]):
			// The last split feeds the merges directly: a prompt's
			// thousands of pieces are never collected in a slice (that
			// slice's growth was most of a long prompt's allocation).
			// One read lock for the whole segment, not one per word:
			// thousands of lock round trips per prompt on one shared
			// cache line cost more than the lookups. A miss steps out to
			// take the write lock.
			t.cacheMu.RLock()
			for _, p := range pieces {
				for i := 0; i < len(p); {
					n := st.sc.match(p[i:])
					if ids, ok := t.cache[p[i:i+n]]; ok {
						dst = append(dst, ids...)
					} else {
						t.cacheMu.RUnlock()
						dst = append(dst, t.encodeWord(p[i:i+n])...)
						t.cacheMu.RLock()
					}
					i += n
				}
			}
			t.cacheMu.RUnlock()
			return dst
		case st.sc != nil:
			var next []string
			for _, p := range pieces {
				next = st.sc.split(p, next)
			}
			pieces = next
		case st.re != nil:
			var next []string
			for _, p := range pieces {
				next = splitIsolated(st.re, p, next, st.matchesOnly)
			}
			pieces = next
		}
	}
	for _, p := range pieces {
		dst = t.appendWord(dst, p)
	}
	return dst
}

// isASCII reports whether s is all ASCII, eight bytes at a time. ASCII
// text is in NFC (no ASCII character decomposes or composes), and most
// prompts are ASCII: norm's own check walks them a byte at a time, which
// was a fifth of encoding an uncached English segment.
func isASCII(s string) bool {
	// Eight bytes per step, as radix and jsonscan scan: binary.LittleEndian
	// compiles to one load where unaligned loads are allowed and to byte
	// loads where they are not (the bytes' order does not matter here).
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:])&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// inert reports whether steps change no piece (a ByteLevel step without
// its regex or prefix space only maps bytes, which the merges do anyway).
func inert(steps []preStep) bool {
	for _, st := range steps {
		if st.sc != nil || st.re != nil || st.prefixSpace {
			return false
		}
	}
	return true
}

// splitIsolated appends the pieces of s split by re with HF's Isolated
// behaviour: every match and every gap between matches is a piece
// (matchesOnly: the gaps are dropped, HF's Removed with invert).
func splitIsolated(re *regexp2.Regexp, s string, out []string, matchesOnly bool) []string {
	rs := []rune(s)
	// Rune offsets → byte offsets, so pieces are substrings of s.
	offs := make([]int, len(rs)+1)
	for i, b := 0, 0; i < len(rs); i++ {
		offs[i] = b
		b += utf8.RuneLen(rs[i])
	}
	offs[len(rs)] = len(s)
	last := 0
	m, _ := re.FindRunesMatch(rs)
	for m != nil {
		if m.Index > last && !matchesOnly {
			out = append(out, s[offs[last]:offs[m.Index]])
		}
		if m.Length > 0 {
			out = append(out, s[offs[m.Index]:offs[m.Index+m.Length]])
		}
		last = m.Index + m.Length
		m, _ = re.FindNextMatch(m)
	}
	if last < len(rs) && !matchesOnly {
		out = append(out, s[offs[last]:])
	}
	return out
}

// appendWord byte-level encodes one pre-tokenized piece and applies the
// merges, lowest rank first (leftmost on ties), as HF's BPE does.
func (t *Tokenizer) appendWord(dst []uint32, w string) []uint32 {
	t.cacheMu.RLock()
	ids, ok := t.cache[w]
	t.cacheMu.RUnlock()
	if ok {
		return append(dst, ids...)
	}
	return append(dst, t.encodeWord(w)...)
}

// encodeWord runs the merges on a word the cache missed and caches the
// ids (within wordCacheLimit and wordCacheBytes).
func (t *Tokenizer) encodeWord(w string) []uint32 {
	ids := t.bpe(w)
	size := len(w) + 4*len(ids)
	if size > wordCacheBytes/16 {
		return ids
	}
	t.cacheMu.Lock()
	if len(t.cache) >= wordCacheLimit || t.cacheBytes+size > wordCacheBytes {
		clear(t.cache)
		t.cacheBytes = 0
	}
	// w is a slice of the caller's text: a key that aliased it would keep
	// the whole prompt alive for as long as the word stays cached.
	t.cache[strings.Clone(w)] = ids
	t.cacheBytes += size
	t.cacheMu.Unlock()
	return ids
}

func (t *Tokenizer) bpe(w string) []uint32 {
	if t.ignoreMerges {
		var sb strings.Builder
		for i := 0; i < len(w); i++ {
			sb.WriteRune(byteLevel[w[i]])
		}
		if id, ok := t.vocab[sb.String()]; ok {
			return []uint32{id}
		}
	}
	syms := make([]uint32, len(w))
	for i := 0; i < len(w); i++ {
		syms[i] = t.byteIDs[w[i]]
	}
	for len(syms) > 1 {
		best, bestRank := -1, int32(0)
		var bestID uint32
		for i := 0; i+1 < len(syms); i++ {
			if m, ok := t.merges[uint64(syms[i])<<32|uint64(syms[i+1])]; ok && (best < 0 || m.rank < bestRank) {
				best, bestRank, bestID = i, m.rank, m.id
			}
		}
		if best < 0 {
			break
		}
		syms[best] = bestID
		syms = append(syms[:best+1], syms[best+2:]...)
	}
	return syms
}
