package accesslog

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// recorder keeps every Write it is given.
type recorder struct {
	mu     sync.Mutex
	writes []string
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}

// count is a Counter.
type count struct{ n atomic.Int64 }

func (c *count) Inc() { c.n.Add(1) }

// waitUntil polls cond every millisecond for up to 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBufWriterFlushes: lines reach the output in whole-line batches when
// the next line would overflow the buffer, when the interval passes, and
// on Close; a line longer than the buffer goes alone.
func TestBufWriterFlushes(t *testing.T) {
	line := func(c byte, n int) string { return strings.Repeat(string(c), n-1) + "\n" }
	a, b, c, d := line('a', 30), line('b', 30), line('c', 30), line('d', 30)
	long := line('L', 250)
	tests := []struct {
		name  string
		size  int
		every time.Duration
		lines []string
		// before are the Writes expected before Close, after what Close
		// adds.
		before, after []string
	}{
		{"by size", 100, time.Hour, []string{a, b, c, d}, []string{a + b + c}, []string{d}},
		{"exact fit stays", 90, time.Hour, []string{a, b, c}, nil, []string{a + b + c}},
		{"by time", 1 << 16, 5 * time.Millisecond, []string{a}, []string{a}, nil},
		{"on close", 1 << 16, time.Hour, []string{a, b, c}, nil, []string{a + b + c}},
		{"long line alone", 100, time.Hour, []string{a, long, b}, []string{a, long}, []string{b}},
		{"nothing written", 100, time.Hour, nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			var drops count
			w := newBufWriter(rec, tt.size, tt.every, &drops)
			for _, l := range tt.lines {
				w.writeLine([]byte(l))
				// The next line finds no write in flight, which would
				// drop it when the buffer is full.
				waitUntil(t, "the write in flight", func() bool { return !w.writing() })
			}
			waitUntil(t, "flush", func() bool { return len(rec.snapshot()) >= len(tt.before) })
			if got := rec.snapshot(); fmt.Sprint(got) != fmt.Sprint(tt.before) && len(tt.before) > 0 {
				t.Fatalf("before Close: %q, want %q", got, tt.before)
			}
			if err := w.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			want := append(append([]string(nil), tt.before...), tt.after...)
			if got := rec.snapshot(); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("writes %q, want %q", got, want)
			}
			if n := drops.n.Load(); n != 0 {
				t.Fatalf("%d lines dropped", n)
			}
			// After Close a line is written on its own, at once.
			w.writeLine([]byte(a))
			if got := rec.snapshot(); got[len(got)-1] != a {
				t.Fatalf("line after Close not written: %q", got)
			}
			if err := w.Close(t.Context()); err != nil {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}

// writing reports whether a buffer is handed over and not yet written.
func (w *bufWriter) writing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wrote != nil
}

// TestBufWriterConcurrent: lines from many goroutines reach the output
// whole, each once, in Writes of whole lines; a line is either written or
// counted as dropped.
func TestBufWriterConcurrent(t *testing.T) {
	rec := &recorder{}
	var drops count
	w := newBufWriter(rec, 4096, time.Millisecond, &drops)
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				w.writeLine(fmt.Appendf(nil, "worker=%d line=%d\n", g, i))
			}
		})
	}
	wg.Wait()
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range rec.snapshot() {
		if !strings.HasSuffix(p, "\n") || len(p) > 4096 {
			t.Fatalf("a Write of %d bytes not of whole lines: %q", len(p), p)
		}
		for l := range strings.Lines(p) {
			var g, i int
			if _, err := fmt.Sscanf(l, "worker=%d line=%d\n", &g, &i); err != nil || seen[l] {
				t.Fatalf("torn or repeated line %q (%v)", l, err)
			}
			seen[l] = true
		}
	}
	if got := len(seen) + int(drops.n.Load()); got != workers*each {
		t.Fatalf("%d lines written and %d dropped, want %d in all", len(seen), drops.n.Load(), workers*each)
	}
}

// TestBufWriterStalledOutput: with an output nobody reads (a pipe whose
// kernel buffer is full), logging does not block: once both buffers are
// full lines are dropped and counted, and Close gives up at its deadline.
func TestBufWriterStalledOutput(t *testing.T) {
	r, wp, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer wp.Close()
	// Fill the pipe's kernel buffer: a write then blocks until read.
	if err := wp.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Skipf("pipe without deadlines: %v", err)
	}
	chunk := make([]byte, 64<<10)
	for range 64 { // the buffer is at most 1 MiB unprivileged
		if _, err := wp.Write(chunk); err != nil {
			break
		}
	}
	if err := wp.SetWriteDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	var drops count
	w := newBufWriter(wp, 4096, time.Millisecond, &drops)
	line := []byte(strings.Repeat("x", 99) + "\n")
	const lines = 10000 // 1 MB: far more than the writer's two buffers
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range lines {
			w.writeLine(line)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("logging blocked on a stalled output")
	}
	// Two buffers' worth of lines are kept, the rest dropped.
	if n, kept := drops.n.Load(), 2*4096/len(line); n < int64(lines-kept) || n >= lines {
		t.Fatalf("%d of %d lines dropped, want all but at most %d", n, lines, kept)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); err == nil {
		t.Fatal("Close reported success with the output stalled")
	}
	// Reading the pipe lets the write in flight and Close's last one end.
	go func() { _, _ = r.WriteTo(discard{}) }()
	if err := w.Close(t.Context()); err != nil {
		t.Fatalf("Close once the output drains: %v", err)
	}
}

// discard is io.Discard as an io.Writer without ReaderFrom tricks.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestLoggerBuffered: a buffered logger writes exactly the lines an
// unbuffered one writes, once closed, and counts nothing dropped.
func TestLoggerBuffered(t *testing.T) {
	for _, fname := range []string{"json", "text"} {
		t.Run(fname, func(t *testing.T) {
			mk := func(o Options, out *bytes.Buffer, drops Counter) *Logger {
				l := logrus.New()
				l.SetOutput(out)
				l.SetFormatter(formatterCases()[fname]())
				return New(o, l.WithField("component", "access"), drops)
			}
			var direct, buffered bytes.Buffer
			var drops count
			o := DefaultOptions()
			o.FlushEvery = 0 // the default interval
			plain, batched := mk(unbuffered(), &direct, nil), mk(o, &buffered, &drops)
			if batched.enc.buf == nil || batched.enc.buf.every != DefaultOptions().FlushEvery {
				t.Fatalf("not buffered at the default interval: %+v", batched.enc.buf)
			}
			for _, e := range encoderCases() {
				plain.Log(&e)
				batched.Log(&e)
			}
			if buffered.Len() != 0 {
				t.Fatalf("lines written before the buffer filled or the interval passed: %q", buffered.String())
			}
			if err := batched.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			if buffered.String() != direct.String() {
				t.Fatalf("buffered:\n%s\nunbuffered:\n%s", buffered.String(), direct.String())
			}
			if drops.n.Load() != 0 {
				t.Fatalf("%d dropped", drops.n.Load())
			}
			if err := plain.Close(t.Context()); err != nil {
				t.Fatalf("closing an unbuffered logger: %v", err)
			}
		})
	}
	var nilLogger *Logger
	if err := nilLogger.Close(t.Context()); err != nil {
		t.Fatalf("closing a nil logger: %v", err)
	}
}
