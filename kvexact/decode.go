package kvexact

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Message frame layout of the engine PUB socket (kv-events.md §1.1).
const (
	FrameTopic   = 0
	FrameSeq     = 1
	FramePayload = 2
	NumFrames    = 3
	SeqFrameLen  = 8
)

// ErrMalformed wraps every decode failure so callers can count them.
var ErrMalformed = errors.New("kvexact: malformed KV event message")

// Message is one decoded three-frame message.
type Message struct {
	Topic string
	Seq   uint64
}

// DecodeMessage decodes a [topic, seq(8B BE), payload] multipart message into
// msg and batch (batch is reset first).
func DecodeMessage(frames [][]byte, msg *Message, batch *Batch) error {
	if len(frames) != NumFrames {
		return fmt.Errorf("%w: %d frames, want %d", ErrMalformed, len(frames), NumFrames)
	}
	if len(frames[FrameSeq]) < SeqFrameLen {
		return fmt.Errorf("%w: sequence frame of %d bytes, want %d", ErrMalformed, len(frames[FrameSeq]), SeqFrameLen)
	}
	msg.Topic = string(frames[FrameTopic])
	msg.Seq = binary.BigEndian.Uint64(frames[FrameSeq])
	return DecodeBatch(frames[FramePayload], batch)
}

// DecodeBatch decodes one msgpack event batch — outer array
// [ts, events, data_parallel_rank?] or map — into b (reset first). Events may
// be positional arrays or maps with a "type" key. Unknown event tags are
// skipped and counted in b.Unknown; anything else malformed is an error.
func DecodeBatch(payload []byte, b *Batch) error {
	b.Reset()
	r := reader{b: payload}
	if err := decodeBatch(&r, b); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if r.off != len(payload) {
		return fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(payload)-r.off)
	}
	return nil
}

func decodeBatch(r *reader, b *Batch) error {
	v, err := r.next()
	if err != nil {
		return err
	}
	switch v.kind {
	case mpArray:
		if v.n < 2 {
			return fmt.Errorf("batch array of %d elements, want at least 2", v.n)
		}
		for i := 0; i < v.n; i++ {
			switch i {
			case 0:
				err = decodeTS(r, b)
			case 1:
				err = decodeEvents(r, b)
			case 2:
				err = decodeRank(r, b)
			default:
				err = r.skip(0)
			}
			if err != nil {
				return err
			}
		}
		return nil
	case mpMap:
		seen := false
		for i := 0; i < v.n; i++ {
			k, err := r.next()
			if err != nil {
				return err
			}
			if k.kind != mpStr {
				return fmt.Errorf("batch map key is %s, want str", k.kind)
			}
			switch string(k.data) {
			case FieldTS:
				err = decodeTS(r, b)
			case FieldEvents:
				seen = true
				err = decodeEvents(r, b)
			case FieldDataParallelRank:
				err = decodeRank(r, b)
			default:
				err = r.skip(0)
			}
			if err != nil {
				return err
			}
		}
		if !seen {
			return fmt.Errorf("batch map without %q", FieldEvents)
		}
		return nil
	}
	return fmt.Errorf("batch is %s, want array or map", v.kind)
}

func decodeTS(r *reader, b *Batch) error {
	v, err := r.next()
	if err != nil {
		return err
	}
	switch v.kind {
	case mpFloat:
		b.TS = v.f
	case mpUint:
		b.TS = float64(v.u)
	case mpInt:
		b.TS = float64(v.i)
	case mpNil:
	default:
		return fmt.Errorf("%s is %s, want a number", FieldTS, v.kind)
	}
	return nil
}

func decodeRank(r *reader, b *Batch) error {
	v, err := r.next()
	if err != nil {
		return err
	}
	if v.kind == mpNil {
		return nil
	}
	n, err := asInt(v)
	if err != nil || n < 0 || n > math.MaxInt32 {
		return fmt.Errorf("%s: invalid rank (%v)", FieldDataParallelRank, err)
	}
	b.DPRank, b.HasRank = int(n), true
	return nil
}

func decodeEvents(r *reader, b *Batch) error {
	v, err := r.next()
	if err != nil {
		return err
	}
	if v.kind != mpArray {
		return fmt.Errorf("%s is %s, want array", FieldEvents, v.kind)
	}
	for i := 0; i < v.n; i++ {
		if err := decodeEvent(r, b); err != nil {
			return fmt.Errorf("events[%d]: %w", i, err)
		}
	}
	return nil
}

func tagKind(tag []byte) EventKind {
	switch string(tag) {
	case TagBlockStored:
		return EventBlockStored
	case TagBlockRemoved:
		return EventBlockRemoved
	case TagAllBlocksCleared:
		return EventAllBlocksCleared
	}
	return 0
}

func decodeEvent(r *reader, b *Batch) error {
	v, err := r.next()
	if err != nil {
		return err
	}
	switch v.kind {
	case mpArray:
		return decodeArrayEvent(r, b, v.n)
	case mpMap:
		return decodeMapEvent(r, b, v.n)
	}
	return fmt.Errorf("event is %s, want array or map", v.kind)
}

func decodeArrayEvent(r *reader, b *Batch, n int) error {
	if n == 0 {
		return errors.New("empty event array")
	}
	tag, err := r.next()
	if err != nil {
		return err
	}
	if tag.kind != mpStr {
		return fmt.Errorf("event tag is %s, want str", tag.kind)
	}
	ev := Event{Kind: tagKind(tag.data)}
	switch ev.Kind {
	case 0:
		b.Unknown++
		return skipN(r, n-1)
	case EventBlockStored:
		if n < minStoredLen {
			return fmt.Errorf("%s with %d elements, want at least %d", TagBlockStored, n, minStoredLen)
		}
	case EventBlockRemoved:
		if n < minRemovedLen {
			return fmt.Errorf("%s with %d elements, want at least %d", TagBlockRemoved, n, minRemovedLen)
		}
	}
	for pos := 1; pos < n; pos++ {
		name := arrayField(ev.Kind, pos)
		if err := decodeField(r, b, &ev, name, pos < minStoredLen); err != nil {
			return fmt.Errorf("%s[%d] %s: %w", ev.Kind, pos, name, err)
		}
	}
	b.Events = append(b.Events, ev)
	return nil
}

// arrayField maps an array position to its field name; "" = ignore (e.g.
// SGLang's trailing attn_dp_rank slot or fields newer than this decoder).
func arrayField(k EventKind, pos int) string {
	switch k {
	case EventBlockStored:
		switch pos {
		case posStoredHashes:
			return FieldBlockHashes
		case posStoredParent:
			return FieldParentBlockHash
		case posStoredTokens:
			return FieldTokenIDs
		case posStoredBlockSize:
			return FieldBlockSize
		case posStoredLoraID:
			return FieldLoraID
		case posStoredMedium:
			return FieldMedium
		case posStoredLoraName:
			return FieldLoraName
		case posStoredExtraKeys:
			return FieldExtraKeys
		case posStoredGroupIdx:
			return FieldGroupIdx
		case posStoredSpecKind:
			return FieldSpecKind
		}
	case EventBlockRemoved:
		switch pos {
		case posRemovedHashes:
			return FieldBlockHashes
		case posRemovedMedium:
			return FieldMedium
		case posRemovedGroupIdx:
			return FieldGroupIdx
		}
	}
	return ""
}

func decodeMapEvent(r *reader, b *Batch, n int) error {
	// One pass: fields mean the same in every event kind, so decode them as
	// they come (the tag may be anywhere) and validate once the kind is known.
	hashes0, tokens0, start := len(b.hashes), len(b.tokens), r.off
	var ev Event
	found, have := false, 0
	for i := 0; i < n; i++ {
		k, err := r.key()
		if err != nil {
			return err
		}
		if string(k) == FieldType {
			t, err := r.next()
			if err != nil {
				return err
			}
			if t.kind != mpStr {
				return fmt.Errorf("%s is %s, want str", FieldType, t.kind)
			}
			ev.Kind, found = tagKind(t.data), true
			continue
		}
		name := mapField(k)
		switch name {
		case FieldBlockHashes, FieldBlockSize, FieldTokenIDs:
			have++
		}
		if err := decodeField(r, b, &ev, name, false); err != nil {
			if unknownMapEvent(r, start, n) {
				b.Unknown++
				b.hashes, b.tokens = b.hashes[:hashes0], b.tokens[:tokens0]
				return nil
			}
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	switch {
	case !found:
		return fmt.Errorf("event map without %q", FieldType)
	case ev.Kind == 0:
		b.Unknown++
		b.hashes, b.tokens = b.hashes[:hashes0], b.tokens[:tokens0]
		return nil
	case ev.Kind == EventBlockStored && have < 3:
		return fmt.Errorf("%s without %s/%s/%s", ev.Kind, FieldBlockHashes, FieldTokenIDs, FieldBlockSize)
	case ev.Kind == EventBlockRemoved && ev.BlockHashes == nil:
		return fmt.Errorf("%s without %s", ev.Kind, FieldBlockHashes)
	}
	b.Events = append(b.Events, ev)
	return nil
}

// unknownMapEvent rescans a map event that failed to decode: when its tag is
// unknown, the failure belongs to a newer engine's event and is skipped, not
// fatal. On true it leaves r after the event.
func unknownMapEvent(r *reader, start, n int) bool {
	r.off = start
	unknown := false
	for i := 0; i < n; i++ {
		k, err := r.next()
		if err != nil || k.kind != mpStr {
			return false
		}
		if string(k.data) == FieldType {
			t, err := r.next()
			if err != nil {
				return false
			}
			unknown = t.kind == mpStr && tagKind(t.data) == 0
			if err := r.skipBody(t, 0); err != nil {
				return false
			}
			continue
		}
		if err := r.skip(0); err != nil {
			return false
		}
	}
	return unknown
}

// mapField maps a map key to its field-name constant without allocating;
// "" for keys this decoder ignores (including "type", handled separately).
func mapField(k []byte) string {
	switch string(k) {
	case FieldBlockHashes:
		return FieldBlockHashes
	case FieldParentBlockHash:
		return FieldParentBlockHash
	case FieldTokenIDs:
		return FieldTokenIDs
	case FieldBlockSize:
		return FieldBlockSize
	case FieldLoraID:
		return FieldLoraID
	case FieldMedium:
		return FieldMedium
	case FieldLoraName:
		return FieldLoraName
	case FieldExtraKeys:
		return FieldExtraKeys
	case FieldGroupIdx:
		return FieldGroupIdx
	case FieldSpecKind:
		return FieldSpecKind
	}
	return ""
}

func skipN(r *reader, n int) error {
	for i := 0; i < n; i++ {
		if err := r.skip(0); err != nil {
			return err
		}
	}
	return nil
}

// decodeField decodes one named field into ev. Required fields must have the
// right type; optional ones (strict=false) of an unexpected type are skipped,
// because positional arrays shift across engine versions.
func decodeField(r *reader, b *Batch, ev *Event, name string, strict bool) error {
	v, err := r.next()
	if err != nil {
		return err
	}
	switch name {
	case FieldBlockHashes:
		if v.kind != mpArray {
			return fmt.Errorf("is %s, want array", v.kind)
		}
		start := len(b.hashes)
		b.hashes = slices.Grow(b.hashes, v.n)
		for i := 0; i < v.n; i++ {
			if u, ok := r.uintFast(); ok {
				b.hashes = append(b.hashes, u)
				continue
			}
			h, err := r.next()
			if err != nil {
				return err
			}
			u, err := asUint64Hash(h)
			if err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
			b.hashes = append(b.hashes, u)
		}
		ev.BlockHashes = b.hashes[start:len(b.hashes):len(b.hashes)]
		return nil
	case FieldParentBlockHash:
		if v.kind == mpNil {
			return nil
		}
		u, err := asUint64Hash(v)
		if err != nil {
			return err
		}
		ev.ParentHash, ev.HasParent = u, true
		return nil
	case FieldTokenIDs:
		if v.kind == mpNil {
			return nil
		}
		if v.kind != mpArray {
			return fmt.Errorf("is %s, want array", v.kind)
		}
		start := len(b.tokens)
		b.tokens = slices.Grow(b.tokens, v.n)
		for i := 0; i < v.n; i++ {
			var k int
			b.tokens, k = appendTokensFast(b.tokens, r, v.n-i)
			if i += k; i == v.n {
				break
			}
			t, err := r.next()
			if err != nil {
				return err
			}
			n, err := asInt(t)
			if err != nil || n < 0 || n > math.MaxUint32 {
				return fmt.Errorf("[%d]: invalid token id (%v)", i, err)
			}
			b.tokens = append(b.tokens, uint32(n))
		}
		ev.TokenIDs = b.tokens[start:len(b.tokens):len(b.tokens)]
		return nil
	case FieldBlockSize:
		n, err := asInt(v)
		if err != nil || n <= 0 || n > math.MaxInt32 {
			return fmt.Errorf("invalid block size (%v)", err)
		}
		ev.BlockSize = int(n)
		return nil
	case FieldMedium:
		switch v.kind {
		case mpNil:
			ev.Medium = MediumGPU
		case mpStr:
			ev.Medium = parseMedium(v.data)
		default:
			return lenient(r, v, strict, "str")
		}
		return nil
	case FieldLoraID:
		if v.kind == mpNil {
			return nil
		}
		n, err := asInt(v)
		if err != nil {
			return lenient(r, v, strict, "int")
		}
		ev.LoraID, ev.HasLoraID = n, true
		return nil
	case FieldLoraName:
		switch v.kind {
		case mpNil:
		case mpStr:
			ev.LoraName = string(v.data)
		default:
			return lenient(r, v, strict, "str")
		}
		return nil
	case FieldGroupIdx:
		if v.kind == mpNil {
			return nil
		}
		n, err := asInt(v)
		if err != nil || n < 0 || n > math.MaxInt32 {
			return lenient(r, v, strict, "int")
		}
		ev.GroupIdx, ev.HasGroup = int(n), true
		return nil
	case FieldSpecKind:
		if v.kind != mpStr {
			return lenient(r, v, strict, "str")
		}
		if string(v.data) == SpecKindFullAttention {
			ev.SpecKind = SpecKindFullAttention // no allocation for the common value
		} else {
			ev.SpecKind = string(v.data)
		}
		return nil
	case FieldExtraKeys:
		if v.kind == mpArray {
			for i := 0; i < v.n; i++ {
				e, err := r.next()
				if err != nil {
					return err
				}
				if e.kind != mpNil {
					ev.HasExtraKeys = true
				}
				if err := r.skipBody(e, 1); err != nil {
					return err
				}
			}
			return nil
		}
		if v.kind != mpNil {
			ev.HasExtraKeys = true
		}
		return r.skipBody(v, 0)
	}
	return r.skipBody(v, 0)
}

// lenient skips an optional field of an unexpected type, or fails when the
// field is required.
func lenient(r *reader, v value, strict bool, want string) error {
	if strict {
		return fmt.Errorf("is %s, want %s", v.kind, want)
	}
	return r.skipBody(v, 0)
}

func parseMedium(b []byte) Medium {
	switch string(b) {
	case MediumNameGPU, "gpu", "":
		return MediumGPU
	case MediumNameCPU, "cpu":
		return MediumCPU
	}
	return MediumOther
}
