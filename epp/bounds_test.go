package epp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestBudgetTake(t *testing.T) {
	cases := []struct {
		name  string
		limit int64
		takes []int64
		want  []bool
		inUse int64
	}{
		{"fits exactly", 10, []int64{4, 6}, []bool{true, true}, 10},
		{"refused past the limit, nothing taken", 10, []int64{4, 7, 6}, []bool{true, false, true}, 10},
		{"zero always fits", 1, []int64{1, 0}, []bool{true, true}, 1},
		{"no limit", 0, []int64{1 << 40, 1 << 40}, []bool{true, true}, 2 << 40},
	}
	for _, tc := range cases {
		b := budget{limit: tc.limit}
		for i, n := range tc.takes {
			if got := b.take(n); got != tc.want[i] {
				t.Errorf("%s: take #%d (%d) = %v, want %v", tc.name, i, n, got, tc.want[i])
			}
		}
		if got := b.inUse(); got != tc.inUse {
			t.Errorf("%s: in use %d, want %d", tc.name, got, tc.inUse)
		}
	}
}

// growBody reserves exactly the capacity it adds, grows by half at least,
// never past the body cap and never below what the chunk needs.
func TestGrowBody(t *testing.T) {
	cases := []struct {
		name                  string
		len, cap, n           int
		want, limit           int
		budget                int64
		wantCap, wantReserved int // wantCap 0: refused
	}{
		{"second chunk presized from the declared length", 100, 100, 100, 1000, 10000, 1 << 20, 1000, 900},
		{"grows by half", 1000, 1000, 100, 0, 10000, 1 << 20, 1500, 500},
		{"at least what the chunk needs", 1000, 1000, 2000, 0, 10000, 1 << 20, 3000, 2000},
		{"never past the body cap", 8000, 8000, 1000, 0, 9000, 1 << 20, 9000, 1000},
		{"refused by the budget", 1000, 1000, 100, 0, 10000, 400, 0, 0},
	}
	for _, tc := range cases {
		b := budget{limit: tc.budget}
		buf := make([]byte, tc.len, tc.cap)
		buf[0] = 'x'
		got := growBody(&b, buf, tc.n, tc.want, tc.limit)
		switch {
		case tc.wantCap == 0 && got != nil:
			t.Errorf("%s: grew to %d, want refused", tc.name, cap(got))
		case tc.wantCap != 0 && (got == nil || cap(got) != tc.wantCap || len(got) != tc.len || got[0] != 'x'):
			t.Errorf("%s: got len %d cap %d, want len %d cap %d with the contents", tc.name, len(got), cap(got), tc.len, tc.wantCap)
		}
		if b.inUse() != int64(tc.wantReserved) {
			t.Errorf("%s: reserved %d, want %d", tc.name, b.inUse(), tc.wantReserved)
		}
	}
}

// gatePicker holds each pick of a body of at least hold bytes until
// release is closed, so the streams it holds keep their bodies; it
// answers any other pick at once.
type gatePicker struct {
	hold    int
	entered chan int // the body length of each held pick, as it is entered
	release chan struct{}
}

func newGatePicker(hold, capacity int) *gatePicker {
	return &gatePicker{hold: hold, entered: make(chan int, capacity), release: make(chan struct{})}
}

func (p *gatePicker) Pick(ctx context.Context, r *Request) (Result, error) {
	if len(r.Body) >= p.hold {
		p.entered <- len(r.Body)
		select {
		case <-p.release:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	return twoEndpoints, nil
}

func (*gatePicker) Served(Outcome) {}

// boundsStream is one client stream of the bounds tests: its first answer
// is read in the background, as it may come only when the test releases
// the picker.
type boundsStream struct {
	st     extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	first  chan firstAnswer
}

type firstAnswer struct {
	r   *extprocv3.ProcessingResponse
	err error
}

// openRequest opens a stream and sends a request of size bytes in chunks
// of at most chunk (none when size is 0 and send is false).
func openRequest(ctx context.Context, t *testing.T, cc *grpc.ClientConn, size, chunk int, send bool) *boundsStream {
	t.Helper()
	var headers *extprocv3.ProcessingRequest
	if send {
		headers = headersDeclaring(size)
	}
	return openWithHeaders(ctx, t, cc, headers, size, chunk)
}

// openWithHeaders is openRequest sending headers (request headers, hints,
// processing modes) ahead of the body; nil headers send nothing.
func openWithHeaders(ctx context.Context, t *testing.T, cc *grpc.ClientConn, headers *extprocv3.ProcessingRequest, size, chunk int) *boundsStream {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	st, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	bs := &boundsStream{st: st, cancel: cancel, first: make(chan firstAnswer, 1)}
	t.Cleanup(cancel)
	if headers != nil {
		// A stream over the stream cap is refused and ended as it opens,
		// so even its headers may find it gone: Send then returns io.EOF
		// and the answer (Recv) is still the refusal.
		err := st.Send(headers)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		piece := bytes.Repeat([]byte("0123456789abcdef"), chunk/16+1)[:chunk]
		for sent := 0; err == nil && sent < size; sent += chunk {
			n := min(chunk, size-sent)
			// Likewise a refused stream may be ended by the EPP while
			// the rest of its body is on the way.
			err = st.Send(reqBody(string(piece[:n]), sent+n == size))
		}
	}
	go func() {
		r, err := st.Recv()
		bs.first <- firstAnswer{r, err}
	}()
	return bs
}

// refusal returns the immediate response's status and reason header, or
// an error when the first answer is something else.
func refusalOf(a firstAnswer) (int, string, error) {
	if a.err != nil {
		return 0, "", a.err
	}
	ir := a.r.GetImmediateResponse()
	if ir == nil {
		return 0, "", fmt.Errorf("first answer is %T, not an immediate response", a.r.GetResponse())
	}
	reason := ""
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == DefaultRefusalReasonHeader {
			reason = string(h.GetHeader().GetRawValue())
		}
	}
	return int(ir.GetStatus().GetCode()), reason, nil
}

// finishPicked reads a held stream's pick and re-emitted body, reports a
// response and closes the stream.
func (bs *boundsStream) finishPicked(ctx context.Context, size int) error {
	var a firstAnswer
	select {
	case a = <-bs.first:
	case <-ctx.Done():
		return ctx.Err()
	}
	if a.err != nil || a.r.GetRequestHeaders() == nil {
		return fmt.Errorf("first answer %v, %v: want the pick", a.r, a.err)
	}
	for got := 0; got < size; {
		r, err := bs.st.Recv()
		if err != nil {
			return fmt.Errorf("re-emitted body: %w", err)
		}
		got += len(r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
	}
	if err := bs.st.Send(respHeaders("200", "", true)); err != nil {
		return err
	}
	if _, err := bs.st.Recv(); err != nil {
		return fmt.Errorf("response headers answer: %w", err)
	}
	if err := bs.st.CloseSend(); err != nil {
		return err
	}
	if _, err := bs.st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("after the last answer: %v, want EOF", err)
	}
	return nil
}

// boundedServer serves opts and p on loopback for the test and connects
// a client to it.
func boundedServer(t *testing.T, opts Options, p Picker) (*Server, *Metrics, *grpc.ClientConn, context.Context) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	s, err := New(opts, p, m)
	if err != nil {
		t.Fatal(err)
	}
	addr, ctx := serveServer(t, s)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return s, m, cc, ctx
}

// awaitHeld waits until the picker holds bs's pick and returns bs; the
// stream answered first, or not held within 30 s, fails the test.
func awaitHeld(t *testing.T, p *gatePicker, bs *boundsStream, what string) *boundsStream {
	t.Helper()
	select {
	case <-p.entered:
		return bs
	case a := <-bs.first:
		t.Fatalf("%s answered %v, %v", what, a.r, a.err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never picked", what)
	}
	return nil
}

// releaseHeld lets the picker answer the streams it holds, finishes each
// (their bodies of size bytes) and waits until they have given back all
// they took from b.
func releaseHeld(ctx context.Context, t *testing.T, p *gatePicker, held []*boundsStream, size int, b *budget) {
	t.Helper()
	close(p.release)
	for i, bs := range held {
		if err := bs.finishPicked(ctx, size); err != nil {
			t.Fatalf("held stream %d: %v", i, err)
		}
	}
	waitInUse(t, b, 0)
}

// waitInUse waits until b has exactly want taken (streams give back what
// they took as their handlers return, just after their last answer).
func waitInUse(t *testing.T, b *budget, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.inUse() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d taken, want %d", b.inUse(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// heapAfterGC is the heap the last of two collections found live (the
// runtime's own figure): the second one drops what sync.Pools, gRPC's
// buffer pool among them, kept through the first.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	return live[0].Value.Uint64()
}

// Many streams with large bodies, all held by slow picks (a queue, a
// stuck ladder): without a process-wide budget each holds its whole body
// and the heap grows with the streams; with one, the streams past it are
// answered 429 at once, the heap stays within the budget, and a small
// request still gets its pick.
func TestBodyBudgetBoundsHeap(t *testing.T) {
	const (
		bodySize = 4 << 20
		chunk    = 1 << 20
		budget   = 18 << 20 // four bodies and room for small ones, not a fifth
		streams  = 16
		small    = 8 << 10
	)
	opts := DefaultOptions()
	opts.MaxBodyBytes, opts.BodyBudgetBytes = bodySize, budget
	p := newGatePicker(chunk, streams)
	s, m, cc, ctx := boundedServer(t, opts, p)
	base := heapAfterGC()

	var held []*boundsStream
	refused := 0
	for i := range streams {
		bs := openRequest(ctx, t, cc, bodySize, chunk, true)
		select {
		case <-p.entered:
			held = append(held, bs)
		case a := <-bs.first:
			status, reason, err := refusalOf(a)
			if err != nil || status != 429 || reason != ReasonBodyMemory {
				t.Fatalf("stream %d: answered %d %q (%v), want 429 %s", i, status, reason, err, ReasonBodyMemory)
			}
			bs.cancel() // as a proxy does once answered: what it still had queued is dropped
			refused++
		case <-time.After(30 * time.Second):
			t.Fatalf("stream %d: neither picked nor refused within 30 s", i)
		}
	}
	grew := int64(heapAfterGC()) - int64(base)
	t.Logf("held %d bodies of %d MiB, refused %d; heap grew %.1f MiB (budget %d MiB), %d MiB taken",
		len(held), bodySize>>20, refused, float64(grew)/(1<<20), budget>>20, s.bodies.inUse()>>20)
	if want := budget / bodySize; len(held) != want {
		t.Errorf("%d streams hold their bodies, want %d (the budget's worth)", len(held), want)
	}
	// What the held bodies take, plus gRPC's and the test's own buffers;
	// without the budget all sixteen bodies (64 MiB) stay.
	if limit := int64(budget + 12<<20); grew > limit {
		t.Errorf("heap grew %d MiB with the streams held, want at most %d MiB", grew>>20, limit>>20)
	}
	if got := counterValue(m.Bounded.WithLabelValues(BoundBodyMemory)); got != float64(refused) {
		t.Errorf("bound refusals counted %v, want %d", got, refused)
	}

	// A small request fits in what is left (once the refused streams have
	// ended and given back what they took before they were refused).
	waitInUse(t, &s.bodies, int64(len(held))*(bodySize+headCost(headersDeclaring(bodySize))))
	sm := openRequest(ctx, t, cc, small, small, true)
	if err := sm.finishPicked(ctx, small); err != nil {
		t.Fatalf("small request beside the held ones: %v", err)
	}

	releaseHeld(ctx, t, p, held, bodySize, &s.bodies)
	// Once they are gone a large body fits again.
	again := openRequest(ctx, t, cc, bodySize, chunk, true)
	if err := again.finishPicked(ctx, bodySize); err != nil {
		t.Fatalf("large request after the others ended: %v", err)
	}
}

// Streams past MaxStreams are answered 429 as they open, even before
// they send anything, and the cap frees up as streams end.
func TestMaxStreams(t *testing.T) {
	const capStreams = 3
	opts := DefaultOptions()
	opts.MaxStreams = capStreams
	p := newGatePicker(1, capStreams+1)
	s, m, cc, ctx := boundedServer(t, opts, p)

	var held []*boundsStream
	for i := range capStreams {
		held = append(held, awaitHeld(t, p, openRequest(ctx, t, cc, 100, 100, true), fmt.Sprintf("stream %d within the cap", i)))
	}
	for _, send := range []bool{true, false} {
		over := openRequest(ctx, t, cc, 100, 100, send)
		select {
		case a := <-over.first:
			status, reason, err := refusalOf(a)
			if err != nil || status != 429 || reason != ReasonTooManyStreams {
				t.Fatalf("stream over the cap (request sent %v): answered %d %q (%v), want 429 %s", send, status, reason, err, ReasonTooManyStreams)
			}
		case <-p.entered:
			t.Fatalf("stream over the cap (request sent %v) reached the picker", send)
		case <-time.After(30 * time.Second):
			t.Fatalf("stream over the cap (request sent %v) not answered", send)
		}
	}
	if got := counterValue(m.Bounded.WithLabelValues(BoundStreams)); got != 2 {
		t.Errorf("bound refusals counted %v, want 2", got)
	}
	close(p.release)
	for i, bs := range held {
		if err := bs.finishPicked(ctx, 100); err != nil {
			t.Fatalf("held stream %d: %v", i, err)
		}
	}
	waitInUse(t, &s.streams, 0)
	next := openRequest(ctx, t, cc, 100, 100, true)
	if err := next.finishPicked(ctx, 100); err != nil {
		t.Fatalf("stream after the others ended: %v", err)
	}
}
