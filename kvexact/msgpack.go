package kvexact

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A minimal zero-copy msgpack reader over a byte slice. It is hand-written
// because the ingest path decodes millions of small integers per second:
// vmihailenco/msgpack's generic Decoder goes through io.Reader and interface
// values (see BenchmarkDecodeBaselineMsgpack for the measured ratio).

// maxDepth bounds nesting while skipping unknown values (fuzz safety).
const maxDepth = 32

var errShort = errors.New("msgpack: unexpected end of input")

type mpKind uint8

const (
	mpNil mpKind = iota
	mpBool
	mpInt   // signed value in i
	mpUint  // unsigned value in u
	mpFloat // value in f
	mpStr
	mpBin
	mpArray
	mpMap
	mpExt
)

func (k mpKind) String() string {
	return [...]string{"nil", "bool", "int", "uint", "float", "str", "bin", "array", "map", "ext"}[k]
}

type reader struct {
	b   []byte
	off int
}

func (r *reader) need(n int) error {
	if n < 0 || len(r.b)-r.off < n {
		return errShort
	}
	return nil
}

func (r *reader) byte1() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) uintN(n int) (uint64, error) {
	if err := r.need(n); err != nil {
		return 0, err
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	switch n {
	case 1:
		return uint64(p[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(p)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(p)), nil
	}
	return binary.BigEndian.Uint64(p), nil
}

// value is the head of one msgpack value. For str/bin, data is the payload;
// for array/map, n is the element/pair count (elements follow).
type value struct {
	kind mpKind
	u    uint64
	i    int64
	f    float64
	n    int
	data []byte
}

// next reads one value head; containers are not descended into.
func (r *reader) next() (value, error) {
	c, err := r.byte1()
	if err != nil {
		return value{}, err
	}
	switch {
	case c <= 0x7f:
		return value{kind: mpUint, u: uint64(c)}, nil
	case c >= 0xe0:
		return value{kind: mpInt, i: int64(int8(c))}, nil
	case c >= 0xa0 && c <= 0xbf:
		return r.bytes(mpStr, int(c&0x1f))
	case c >= 0x90 && c <= 0x9f:
		return r.container(mpArray, uint64(c&0x0f), 1)
	case c >= 0x80 && c <= 0x8f:
		return r.container(mpMap, uint64(c&0x0f), 2)
	}
	switch c {
	case 0xc0:
		return value{kind: mpNil}, nil
	case 0xc2, 0xc3:
		return value{kind: mpBool, u: uint64(c & 1)}, nil
	case 0xc4, 0xc5, 0xc6:
		return r.sized(mpBin, 1<<(c-0xc4))
	case 0xd9, 0xda, 0xdb:
		return r.sized(mpStr, 1<<(c-0xd9))
	case 0xc7, 0xc8, 0xc9:
		n, err := r.uintN(1 << (c - 0xc7))
		if err != nil {
			return value{}, err
		}
		return r.bytes(mpExt, int(min(n, math.MaxInt32))+1) // +1: the ext type byte
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return r.bytes(mpExt, 1+1<<(c-0xd4))
	case 0xca:
		u, err := r.uintN(4)
		return value{kind: mpFloat, f: float64(math.Float32frombits(uint32(u)))}, err
	case 0xcb:
		u, err := r.uintN(8)
		return value{kind: mpFloat, f: math.Float64frombits(u)}, err
	case 0xcc, 0xcd, 0xce, 0xcf:
		u, err := r.uintN(1 << (c - 0xcc))
		return value{kind: mpUint, u: u}, err
	case 0xd0:
		u, err := r.uintN(1)
		return value{kind: mpInt, i: int64(int8(u))}, err
	case 0xd1:
		u, err := r.uintN(2)
		return value{kind: mpInt, i: int64(int16(u))}, err
	case 0xd2:
		u, err := r.uintN(4)
		return value{kind: mpInt, i: int64(int32(u))}, err
	case 0xd3:
		u, err := r.uintN(8)
		return value{kind: mpInt, i: int64(u)}, err
	case 0xdc, 0xdd:
		n, err := r.uintN(2 << (c - 0xdc))
		if err != nil {
			return value{}, err
		}
		return r.container(mpArray, n, 1)
	case 0xde, 0xdf:
		n, err := r.uintN(2 << (c - 0xde))
		if err != nil {
			return value{}, err
		}
		return r.container(mpMap, n, 2)
	}
	return value{}, fmt.Errorf("msgpack: invalid format byte 0x%02x at offset %d", c, r.off-1)
}

func (r *reader) sized(k mpKind, lenBytes int) (value, error) {
	n, err := r.uintN(lenBytes)
	if err != nil {
		return value{}, err
	}
	if n > math.MaxInt32 {
		return value{}, errShort
	}
	return r.bytes(k, int(n))
}

func (r *reader) bytes(k mpKind, n int) (value, error) {
	if err := r.need(n); err != nil {
		return value{}, err
	}
	v := value{kind: k, data: r.b[r.off : r.off+n], n: n}
	r.off += n
	return v, nil
}

// container checks the declared count against the remaining input (each
// element needs at least one byte) so hostile lengths cannot force huge
// allocations downstream.
func (r *reader) container(k mpKind, n uint64, per uint64) (value, error) {
	if n > uint64(len(r.b)-r.off)/per {
		return value{}, fmt.Errorf("msgpack: %s of %d elements exceeds the remaining %d bytes", k, n, len(r.b)-r.off)
	}
	return value{kind: k, n: int(n)}, nil
}

// skipBody skips the elements of a container whose head was already read.
func (r *reader) skipBody(v value, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("msgpack: nesting deeper than %d", maxDepth)
	}
	count := v.n
	if v.kind == mpMap {
		count *= 2
	} else if v.kind != mpArray {
		return nil
	}
	for i := 0; i < count; i++ {
		if err := r.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// skip skips one complete value.
func (r *reader) skip(depth int) error {
	if _, ok := r.uintFast(); ok {
		return nil
	}
	v, err := r.next()
	if err != nil {
		return err
	}
	return r.skipBody(v, depth)
}

// asUint64Hash converts a hash value bit-preservingly: ints of any width
// (signed wrap), bin/str take the last 8 bytes big-endian.
func asUint64Hash(v value) (uint64, error) {
	switch v.kind {
	case mpUint:
		return v.u, nil
	case mpInt:
		return uint64(v.i), nil
	case mpBin, mpStr:
		return tailUint64(v.data), nil
	}
	return 0, fmt.Errorf("hash must be an int or bytes, got %s", v.kind)
}

// asInt converts an integer value to int, rejecting non-integers.
func asInt(v value) (int64, error) {
	switch v.kind {
	case mpUint:
		if v.u > math.MaxInt64 {
			return 0, fmt.Errorf("integer %d overflows int64", v.u)
		}
		return int64(v.u), nil
	case mpInt:
		return v.i, nil
	}
	return 0, fmt.Errorf("expected an integer, got %s", v.kind)
}

// uintFast decodes an unsigned integer of the common formats inline (the
// token and hash arrays are most of every batch); ok=false means "use next".
func (r *reader) uintFast() (u uint64, ok bool) {
	b, off := r.b, r.off
	if off >= len(b) {
		return 0, false
	}
	switch c := b[off]; {
	case c <= 0x7f:
		r.off++
		return uint64(c), true
	case c == 0xcc && off+2 <= len(b):
		r.off += 2
		return uint64(b[off+1]), true
	case c == 0xcd && off+3 <= len(b):
		r.off += 3
		return uint64(binary.BigEndian.Uint16(b[off+1:])), true
	case c == 0xce && off+5 <= len(b):
		r.off += 5
		return uint64(binary.BigEndian.Uint32(b[off+1:])), true
	case c == 0xcf && off+9 <= len(b):
		r.off += 9
		return binary.BigEndian.Uint64(b[off+1:]), true
	}
	return 0, false
}

// appendTokensFast decodes up to n token ids in the formats real token ids
// use (fixint, uint8/16/32) in one tight loop (token arrays are most of
// every batch) and stops at the first other format, which the caller
// decodes with next() (that also reports errors precisely).
func appendTokensFast(dst []uint32, r *reader, n int) ([]uint32, int) {
	b, off := r.b, r.off
	i := 0
	for ; i < n && off < len(b); i++ {
		c := b[off]
		switch {
		case c <= 0x7f:
			dst = append(dst, uint32(c))
			off++
			continue
		case c == 0xce && off+5 <= len(b):
			dst = append(dst, binary.BigEndian.Uint32(b[off+1:off+5]))
			off += 5
			continue
		case c == 0xcd && off+3 <= len(b):
			dst = append(dst, uint32(binary.BigEndian.Uint16(b[off+1:off+3])))
			off += 3
			continue
		case c == 0xcc && off+2 <= len(b):
			dst = append(dst, uint32(b[off+1]))
			off += 2
			continue
		}
		break
	}
	r.off = off
	return dst, i
}

// key reads a map key, which must be a string; fixstr (every key of the
// schema) is decoded inline.
func (r *reader) key() ([]byte, error) {
	if r.off < len(r.b) {
		if c := r.b[r.off]; c >= 0xa0 && c <= 0xbf {
			n := int(c & 0x1f)
			if r.off+1+n <= len(r.b) {
				k := r.b[r.off+1 : r.off+1+n]
				r.off += 1 + n
				return k, nil
			}
		}
	}
	v, err := r.next()
	if err != nil {
		return nil, err
	}
	if v.kind != mpStr {
		return nil, fmt.Errorf("map key is %s, want str", v.kind)
	}
	return v.data, nil
}
