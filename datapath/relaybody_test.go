package datapath

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// memBody is an engine body read from memory in the chunks given, the
// last with io.EOF (upstream.BoundedBody: buffered says whether all of it
// is in memory).
type memBody struct {
	chunks   []string
	buffered bool
}

func (b *memBody) Read(p []byte) (int, error) {
	if len(b.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.chunks[0])
	b.chunks = b.chunks[1:]
	if len(b.chunks) == 0 {
		return n, io.EOF
	}
	return n, nil
}
func (b *memBody) Close() error                { return nil }
func (b *memBody) Buffered() bool              { return b.buffered }
func (b *memBody) SetReadDeadline(_ time.Time) {}

func TestBodyInOneWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		length   int64
		buffered bool
		noBound  bool // the Sender's body has no BoundedBody
		want     bool
	}{
		{"small, in memory", 200, true, false, true},
		{"empty, in memory", 0, true, false, true},
		{"at the bound", oneWriteBody, true, false, true},
		{"over the bound", oneWriteBody + 1, true, false, false},
		{"unknown length", -1, true, false, false},
		{"not yet in memory", 200, false, false, false},
		{"no BoundedBody", 200, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{ContentLength: tc.length}
			var ub interface {
				Buffered() bool
				SetReadDeadline(time.Time)
			}
			if !tc.noBound {
				ub = &memBody{buffered: tc.buffered}
			}
			if got := bodyInOneWrite(resp, ub); got != tc.want {
				t.Errorf("bodyInOneWrite = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCopyBodySharedReading: the head's reading times the first byte and
// the end only when the whole body comes in the first read and goes out
// in one write through the request's clock; otherwise the clock is read.
func TestCopyBodySharedReading(t *testing.T) {
	at := time.Now().Add(-time.Hour) // far from any fresh reading
	for _, tc := range []struct {
		name   string
		chunks []string
		at     time.Time
		wrap   bool // a writer (as metering's) around the clock
		shared bool
	}{
		{"whole body in one read", []string{`{"a":1}`}, at, false, true},
		{"no reading given", []string{`{"a":1}`}, time.Time{}, false, false},
		{"two reads", []string{`{"a":`, `1}`}, at, false, false},
		{"a writer around the clock", []string{`{"a":1}`}, at, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			x := &exchange{start: at.Add(-time.Second)}
			x.obs.clock.Reset(rec)
			x.obs.clock.Start = &x.start
			x.w = &x.obs.clock
			if tc.wrap {
				x.w = struct{ http.ResponseWriter }{&x.obs.clock}
			}
			want := strings.Join(tc.chunks, "")
			resp := &http.Response{StatusCode: http.StatusOK, ContentLength: int64(len(want)), Body: &memBody{chunks: tc.chunks, buffered: true}}
			rt := &Runtime{}
			rt.bufs.New = func() any { b := make([]byte, 32<<10); return &b }
			relayed, rerr, gone, end := rt.copyBody(x, resp, false, false, nil, func() {}, tc.at)
			if rerr != nil || gone || relayed != uint64(len(want)) || rec.Body.String() != want {
				t.Fatalf("copyBody = %d, %v, %v; body %q, want %d bytes %q", relayed, rerr, gone, rec.Body.String(), len(want), want)
			}
			if got := end.Equal(at) && x.obs.clock.First().Equal(at); got != tc.shared {
				t.Errorf("end %v, first byte %v: shared reading %v, want %v", end, x.obs.clock.First(), got, tc.shared)
			}
			if !tc.shared && !end.IsZero() {
				t.Errorf("end %v, want zero (the relay reads the clock)", end)
			}
		})
	}
}
