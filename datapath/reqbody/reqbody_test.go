package reqbody

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

func TestRead(t *testing.T) {
	const limit = 1 << 20
	for _, tc := range []struct {
		name     string
		size     int
		declared int // -1: unknown (chunked)
		oneByte  bool
		wantErr  error
	}{
		{"empty declared", 0, 0, false, nil},
		{"empty chunked", 0, -1, false, nil},
		{"tiny in place", 100, 100, false, nil},
		{"in place boundary", firstChunk, firstChunk, false, nil},
		{"one past in place", firstChunk + 1, firstChunk + 1, false, nil},
		{"exact chunk multiple", firstChunk + 16<<10, firstChunk + 16<<10, false, nil},
		{"large declared", 300 << 10, 300 << 10, false, nil},
		{"large chunked", 300 << 10, -1, false, nil},
		{"byte at a time", 70 << 10, 70 << 10, true, nil},
		{"at limit", limit, limit, false, nil},
		{"declared over limit", 10, limit + 1, false, ErrTooLarge},
		{"chunked over limit", limit + 1, -1, false, ErrTooLarge},
		{"short tiny body", 10, 20, false, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Options{MaxInFlightBytes: 4 << 20}, nil)
			want := pattern(tc.size)
			var src io.Reader = bytes.NewReader(want)
			if tc.oneByte {
				src = iotest.OneByteReader(src)
			}
			b, err := r.Read(src, int64(tc.declared), limit)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if r.InFlight() != 0 {
					t.Fatalf("a failed read left %d bytes charged", r.InFlight())
				}
				return
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Fatalf("read %d bytes, want %d identical bytes", len(b.Bytes()), len(want))
			}
			if r.InFlight() != int64(tc.size) {
				t.Fatalf("charged %d while holding a %d-byte body", r.InFlight(), tc.size)
			}
			b.Release()
			b.Release()
			if r.InFlight() != 0 {
				t.Fatalf("charged %d after Release", r.InFlight())
			}
		})
	}
}

// blockingReader yields its prefix, then blocks until released: a client
// that declared a large body and sent only part of it.
type blockingReader struct {
	prefix  *strings.Reader
	release chan struct{}
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if b.prefix.Len() > 0 {
		return b.prefix.Read(p)
	}
	<-b.release
	return 0, io.ErrUnexpectedEOF
}

// TestDeclaredSizeCostsNothing: many readers that declared 32 MiB and sent
// nothing hold one first chunk each, not 32 MiB.
func TestDeclaredSizeCostsNothing(t *testing.T) {
	r := New(Options{MaxInFlightBytes: 1 << 30}, nil)
	const n = 50
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Read(&blockingReader{strings.NewReader(""), release}, 32<<20, 32<<20)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("err = %v, want the reader's unexpected EOF", err)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.InFlight() < n*firstChunk && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // every reader takes its first chunk
	}
	if got := r.InFlight(); got != n*firstChunk {
		t.Fatalf("charged %d for %d headers-only 32 MiB bodies, want %d", got, n, n*firstChunk)
	}
	close(release)
	wg.Wait()
	if r.InFlight() != 0 {
		t.Fatalf("charged %d after every read failed", r.InFlight())
	}
}

func TestBudget(t *testing.T) {
	// Reading a 100 KiB body peaks at 248 KiB: its chunks (4+16+64+64 KiB)
	// and the exact copy.
	r := New(Options{MaxInFlightBytes: 300 << 10}, nil)
	held, err := r.Read(bytes.NewReader(pattern(100<<10)), 100<<10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// A second one on top of the first held body would peak at 348 KiB.
	if _, err := r.Read(bytes.NewReader(pattern(100<<10)), 100<<10, 1<<20); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("err = %v, want ErrOverloaded", err)
	}
	if r.InFlight() != 100<<10 {
		t.Fatalf("an overloaded read left %d charged, want only the held body", r.InFlight())
	}
	held.Release()
	b, err := r.Read(bytes.NewReader(pattern(100<<10)), 100<<10, 1<<20)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	b.Release()
	// No budget: anything goes.
	r = New(Options{}, nil)
	if b, err := r.Read(bytes.NewReader(pattern(2<<20)), -1, 4<<20); err != nil || len(b.Bytes()) != 2<<20 {
		t.Fatalf("unbounded read: %d bytes, %v", len(b.Bytes()), err)
	}
}

func BenchmarkRead(b *testing.B) {
	for _, size := range []int{200, 2 << 10, 16 << 10, 256 << 10} {
		body := pattern(size)
		r := New(DefaultOptions(), nil)
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				got, err := r.Read(bytes.NewReader(body), int64(size), 32<<20)
				if err != nil {
					b.Fatal(err)
				}
				got.Release()
			}
		})
	}
}
