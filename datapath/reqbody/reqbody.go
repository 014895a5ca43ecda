package reqbody

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/infergate/infergate/metrics"
)

// Errors of Reader.Read; anything else is the source's read error.
var (
	ErrTooLarge   = errors.New("request body exceeds the size limit")
	ErrOverloaded = errors.New("in-flight request body memory is at its limit")
)

// Chunk sizes: the first chunk is small so that a connection which sends
// only headers holds next to nothing; later ones are larger so big bodies
// take few reads and copies.
const (
	firstChunk = 4 << 10
	lastChunk  = 64 << 10
	// inPlaceMax: a body declared at most this long is read straight into a
	// buffer of its declared size (no chunk, no copy).
	inPlaceMax = firstChunk
)

// chunkSizes are the pooled chunk classes, smallest first.
var chunkSizes = [...]int{firstChunk, 16 << 10, lastChunk}

// Reader reads bodies against one memory budget. Safe for concurrent use.
type Reader struct {
	max   int64
	used  atomic.Int64
	m     *metrics.Edge // nil: not exported
	pools [len(chunkSizes)]sync.Pool
}

// New builds a Reader. m may be nil.
func New(opts Options, m *metrics.Edge) *Reader {
	r := &Reader{max: opts.MaxInFlightBytes, m: m}
	for i, n := range chunkSizes {
		r.pools[i].New = func() any { b := make([]byte, n); return &b }
	}
	return r
}

// InFlight is the number of bytes currently charged.
func (r *Reader) InFlight() int64 { return r.used.Load() }

// Body is a completely read request body. Release it when the request ends.
type Body struct {
	b    []byte
	held int64
	r    *Reader
}

// Bytes returns the body (nil when empty). It stays valid after Release.
func (b *Body) Bytes() []byte { return b.b }

// Release returns the body's charge to the budget. Calling it again, or on
// a zero Body, does nothing.
func (b *Body) Release() {
	if b.r != nil && b.held > 0 {
		b.r.refund(b.held)
	}
	b.held = 0
}

// Read reads src to EOF. declared is the Content-Length (negative when
// unknown), limit the largest body accepted. On error nothing stays
// charged.
func (r *Reader) Read(src io.Reader, declared, limit int64) (Body, error) {
	if declared > limit {
		return Body{}, ErrTooLarge
	}
	if declared >= 0 && declared <= inPlaceMax {
		return r.readInPlace(src, declared)
	}
	var (
		chunks [8]*[]byte // a 32 MiB body needs about 512 chunks; most need 1
		list   = chunks[:0]
		class  = 0
		total  int64
		held   int64
	)
	free := func() {
		for _, c := range list {
			r.pools[classOf(len(*c))].Put(c)
		}
		r.refund(held)
	}
	for {
		size := chunkSizes[class]
		if !r.charge(int64(size)) {
			free()
			return Body{}, ErrOverloaded
		}
		held += int64(size)
		c := r.pools[class].Get().(*[]byte)
		list = append(list, c)
		n, err := fill(src, *c)
		total += int64(n)
		if total > limit {
			free()
			return Body{}, ErrTooLarge
		}
		if err == io.EOF || (err == nil && total == declared) {
			break // a declared body is complete at its length: no extra read
		}
		if err != nil {
			free()
			return Body{}, err
		}
		class = min(class+1, len(chunkSizes)-1)
	}
	if total == 0 {
		free()
		return Body{}, nil
	}
	// The exact buffer is charged before the chunks are given back, so the
	// budget always covers what is really held.
	if !r.charge(total) {
		free()
		return Body{}, ErrOverloaded
	}
	out := make([]byte, 0, total)
	for _, c := range list {
		out = append(out, (*c)[:min(int64(len(*c)), total-int64(len(out)))]...)
	}
	free()
	return Body{b: out, held: total, r: r}, nil
}

// readInPlace reads a tiny declared body into a buffer of exactly that size.
func (r *Reader) readInPlace(src io.Reader, declared int64) (Body, error) {
	if declared == 0 {
		return Body{}, nil
	}
	if !r.charge(declared) {
		return Body{}, ErrOverloaded
	}
	b := make([]byte, declared)
	n, err := fill(src, b)
	if n < len(b) {
		r.refund(declared)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // shorter than its Content-Length
		}
		return Body{}, err
	}
	return Body{b: b, held: declared, r: r}, nil
}

// fill reads into b until it is full (nil error) or the source ends or
// fails (that error, io.EOF for a clean end).
func fill(src io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := src.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func classOf(size int) int {
	for i, n := range chunkSizes {
		if n == size {
			return i
		}
	}
	panic("reqbody: foreign chunk size")
}

// charge takes n bytes from the budget, or nothing and false.
func (r *Reader) charge(n int64) bool {
	if v := r.used.Add(n); r.max > 0 && v > r.max {
		r.used.Add(-n)
		if r.m != nil {
			r.m.BodyOverloaded.Inc()
		}
		return false
	}
	if r.m != nil {
		r.m.BodyBytes.Add(float64(n))
	}
	return true
}

func (r *Reader) refund(n int64) {
	if n <= 0 {
		return
	}
	r.used.Add(-n)
	if r.m != nil {
		r.m.BodyBytes.Sub(float64(n))
	}
}
