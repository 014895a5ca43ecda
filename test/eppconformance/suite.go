package eppconformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/infergate/infergate/test/extprocclient"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Target is the EPP under test and what it can do for the suite.
type Target struct {
	// Addr is the ext_proc address (host:port). Required.
	Addr string
	// HealthAddr is the gRPC health address; empty skips the health test.
	HealthAddr string
	// Pool is the set of endpoints the EPP picks from (at least two). Every
	// pick must belong to it, and the subset tests hint members of it.
	Pool []string
	// ShedHeaders are request headers that make the EPP shed the request with
	// 429; nil skips the shedding test.
	ShedHeaders map[string]string
	// UnavailableHeaders are request headers that make the EPP find no ready
	// endpoint (503); nil skips that test.
	UnavailableHeaders map[string]string
	// Capacity is how many picks the EPP holds at once before it sheds (an
	// EPP that bounds the requests in flight on its pool, such as admission
	// windows summed over the pool); 0 skips the saturation test. A request
	// over capacity may wait (a queue) but must be answered 429 within the
	// suite's bound while the held streams stay open.
	Capacity int
	// RefusalReasonHeader names the response header the EPP puts the reason of
	// a 429 in. Required with ShedHeaders or Capacity.
	RefusalReasonHeader string
	// Affinity says the EPP keeps a conversation (bodies sharing a long prefix)
	// on one endpoint of an idle pool; false skips the affinity test.
	Affinity bool
	// Served, when set, returns the served endpoints the EPP has recorded from
	// response-path reports, so feedback can be checked end to end.
	Served func() []string
	// Goroutines, when set, returns the EPP's goroutine count (in process:
	// runtime.NumGoroutine; out of process: go_goroutines from /metrics), so
	// cancelled and malformed streams can be shown to leave nothing behind.
	Goroutines func() (int, error)
	// Streams is the number of concurrent streams (default 1,000).
	Streams int
	// MaxBody is the largest body sent (default 4 MiB).
	MaxBody int
}

// Run runs the suite against tg as subtests of t.
func Run(t *testing.T, tg Target) {
	t.Helper()
	if tg.Addr == "" {
		t.Fatal("eppconformance: Target.Addr is required")
	}
	if len(tg.Pool) < 2 {
		t.Fatal("eppconformance: Target.Pool needs at least two endpoints")
	}
	if (tg.ShedHeaders != nil || tg.Capacity > 0) && tg.RefusalReasonHeader == "" {
		t.Fatal("eppconformance: Target.RefusalReasonHeader is required with ShedHeaders or Capacity")
	}
	if tg.Streams == 0 {
		tg.Streams = defaultConcurrency
	}
	if tg.MaxBody == 0 {
		tg.MaxBody = defaultMaxBodyForTest
	}
	cc, err := extprocclient.Dial(tg.Addr)
	if err != nil {
		t.Fatalf("dial %s: %v", tg.Addr, err)
	}
	t.Cleanup(func() { cc.Close() })
	s := &suite{tg: tg, cc: cc}

	// Warm the connection so the goroutine baseline includes its machinery.
	if _, err := s.pickOK(t, request{body: chatBody("warm-up", 1<<10)}); err != nil {
		t.Fatalf("warm-up request: %v", err)
	}
	s.baseline = s.goroutines(t)

	t.Run("Health", s.testHealth)
	t.Run("PickHeaderAndMetadataAgree", s.testPick)
	t.Run("ProtocolOrder", s.testOrder)
	t.Run("NoBody", s.testNoBody)
	t.Run("Trailers", s.testTrailers)
	t.Run("BodySizes", s.testBodySizes)
	t.Run("Subset", s.testSubset)
	t.Run("SubsetEmpty", s.testSubsetEmpty)
	t.Run("SubsetNoneEligible", s.testSubsetNoneEligible)
	t.Run("Shed", s.testShed)
	t.Run("ShedAtCapacity", s.testCapacity)
	t.Run("NoReadyEndpoint", s.testUnavailable)
	t.Run("Affinity", s.testAffinity)
	t.Run("ServedFeedback", s.testServed)
	t.Run("Concurrency", s.testConcurrency)
	t.Run("Cancellation", s.testCancellation)
	t.Run("Malformed", s.testMalformed)
}

type suite struct {
	tg       Target
	cc       *grpc.ClientConn
	baseline int
}

// bound keeps a broken EPP from hanging the suite; it is not a latency check.
const bound = 60 * time.Second

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// roundTrip sends one whole request, half-closes, and reads every answer.
func (s *suite) roundTrip(ctx context.Context, r request) ([]*extprocv3.ProcessingResponse, error) {
	st, err := open(ctx, s.cc)
	if err != nil {
		return nil, err
	}
	st.sendAsync(r.messages(), true)
	resps, err := st.recvAll()
	if serr := st.sendDone(); err == nil {
		err = serr
	}
	return resps, err
}

// pickOK sends r and checks the whole request-phase answer.
func (s *suite) pickOK(t *testing.T, r request) (pick, error) {
	t.Helper()
	resps, err := s.roundTrip(s.ctx(t), r)
	if err != nil {
		return pick{}, fmt.Errorf("stream ended with %v after %d answers", err, len(resps))
	}
	return checkRequestPhase(resps, r, s.tg.Pool)
}

// checkRequestPhase checks the answers to a complete request: the pick first,
// then the body re-emitted (same bytes, end_of_stream on the last chunk unless
// trailers end it), then the trailers answer, then nothing.
func checkRequestPhase(resps []*extprocv3.ProcessingResponse, r request, pool []string) (pick, error) {
	if len(resps) == 0 {
		return pick{}, errors.New("no answer")
	}
	p, err := decodePick(resps[0], pool)
	if err != nil {
		return pick{}, err
	}
	rest := resps[1:]
	if len(r.body) == 0 && !r.trailers {
		if len(rest) != 0 {
			return p, fmt.Errorf("bodiless request: want only the headers answer, got %d more", len(rest))
		}
		return p, nil
	}
	var got bytes.Buffer
	sawEOS := false
	for i, a := range rest {
		if a.GetRequestTrailers() != nil {
			if !r.trailers || i != len(rest)-1 {
				return p, fmt.Errorf("answer %d: unexpected trailers answer", i+1)
			}
			break
		}
		sr := a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return p, fmt.Errorf("answer %d: want a streamed request-body answer, got %T", i+1, a.GetResponse())
		}
		if sawEOS {
			return p, fmt.Errorf("answer %d: body chunk after end_of_stream", i+1)
		}
		got.Write(sr.GetBody())
		sawEOS = sr.GetEndOfStream()
	}
	if !bytes.Equal(got.Bytes(), r.body) {
		return p, fmt.Errorf("re-emitted body differs: %d bytes back for %d sent (first difference at %d)", got.Len(), len(r.body), firstDiff(got.Bytes(), r.body))
	}
	if r.trailers {
		if sawEOS {
			return p, errors.New("body chunk marked end_of_stream although trailers end the body")
		}
		if rest[len(rest)-1].GetRequestTrailers() == nil {
			return p, errors.New("no trailers answer")
		}
	} else if !sawEOS {
		return p, errors.New("no re-emitted chunk carries end_of_stream")
	}
	return p, nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// refusal expects the stream to be answered with one ImmediateResponse.
func (s *suite) refusal(t *testing.T, r request) *extprocv3.ImmediateResponse {
	t.Helper()
	resps, err := s.roundTrip(s.ctx(t), r)
	if err != nil {
		t.Fatalf("want an ImmediateResponse, stream ended with %v after %d answers", err, len(resps))
	}
	if len(resps) != 1 || resps[0].GetImmediateResponse() == nil {
		t.Fatalf("want exactly one ImmediateResponse, got %s", describe(resps))
	}
	return resps[0].GetImmediateResponse()
}

func describe(resps []*extprocv3.ProcessingResponse) string {
	var parts []string
	for _, r := range resps {
		parts = append(parts, fmt.Sprintf("%T", r.GetResponse()))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func immediateHeader(ir *extprocv3.ImmediateResponse, name string) string {
	for _, o := range ir.GetHeaders().GetSetHeaders() {
		if strings.EqualFold(o.GetHeader().GetKey(), name) {
			return headerOptValue(o.GetHeader())
		}
	}
	return ""
}

func (s *suite) goroutines(t *testing.T) int {
	if s.tg.Goroutines == nil {
		return 0
	}
	n, err := s.tg.Goroutines()
	if err != nil {
		t.Fatalf("goroutine count: %v", err)
	}
	return n
}

// settled waits (bounded) for the EPP's goroutines to come back to the
// baseline: streams that ended must leave nothing running.
func (s *suite) settled(t *testing.T) {
	t.Helper()
	if s.tg.Goroutines == nil {
		return
	}
	const slack = 10
	deadline := time.Now().Add(bound)
	for {
		n := s.goroutines(t)
		if n <= s.baseline+slack {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines: %d at the start, still %d after the streams ended", s.baseline, n)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chatBody is an OpenAI-style chat body of about size bytes. Keys are sorted
// and nothing needs escaping, so an EPP that decodes and re-encodes the JSON
// still re-emits the same bytes.
func chatBody(seed string, size int) []byte {
	head := `{"messages":[{"content":"`
	tail := `","role":"user"}],"model":"conformance"}`
	return []byte(head + filler(seed, size-len(head)-len(tail)) + tail)
}

func filler(seed string, n int) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(n + 32)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s word%d ", seed, i)
	}
	return b.String()[:n]
}

func (s *suite) testHealth(t *testing.T) {
	if s.tg.HealthAddr == "" {
		t.Skip("no health address")
	}
	hc, err := extprocclient.Dial(s.tg.HealthAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	client := healthpb.NewHealthClient(hc)
	for _, svc := range []string{"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		resp, err := client.Check(s.ctx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Errorf("health %q: %v", svc, err)
			continue
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %s, want SERVING", svc, resp.GetStatus())
		}
	}
}

func (s *suite) testPick(t *testing.T) {
	p, err := s.pickOK(t, request{body: chatBody("pick", 1<<10), chunk: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.endpoints) == 0 {
		t.Fatal("empty pick")
	}
}

func (s *suite) testOrder(t *testing.T) {
	// Many small chunks: the answers must come back headers first, then the
	// chunks' bytes in order.
	if _, err := s.pickOK(t, request{body: chatBody("order", 10_000), chunk: 997}); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) testNoBody(t *testing.T) {
	if _, err := s.pickOK(t, request{headers: map[string]string{":method": "GET", ":path": "/v1/models"}}); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) testTrailers(t *testing.T) {
	if _, err := s.pickOK(t, request{body: chatBody("trailers", 40_000), trailers: true}); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) testBodySizes(t *testing.T) {
	for _, size := range []int{1 << 10, 64<<10 + 1, 1 << 20, s.tg.MaxBody} {
		t.Run(fmt.Sprintf("%dB", size), func(t *testing.T) {
			if _, err := s.pickOK(t, request{body: chatBody(fmt.Sprintf("size%d", size), size)}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func (s *suite) testSubset(t *testing.T) {
	// Each single-member hint forces that member; a two-member hint keeps the
	// pick (every fallback included) inside it.
	for i, ep := range s.tg.Pool {
		subset := []string{ep}
		p, err := s.pickOK(t, request{body: chatBody(fmt.Sprintf("subset%d", i), 2<<10), subset: &subset})
		if err != nil {
			t.Fatalf("subset %q: %v", subset, err)
		}
		for _, e := range p.endpoints {
			if e != ep {
				t.Errorf("subset %q: picked %q", subset, p.endpoints)
			}
		}
	}
	pair := []string{s.tg.Pool[len(s.tg.Pool)-1], s.tg.Pool[0]}
	for i := range 8 {
		p, err := s.pickOK(t, request{body: chatBody(fmt.Sprintf("pair%d", i), 2<<10), subset: &pair})
		if err != nil {
			t.Fatalf("subset %q: %v", pair, err)
		}
		for _, e := range p.endpoints {
			if !contains(pair, e) {
				t.Errorf("subset %q: picked %q", pair, p.endpoints)
			}
		}
	}
}

func (s *suite) testSubsetEmpty(t *testing.T) {
	empty := []string{}
	ir := s.refusal(t, request{body: chatBody("empty-subset", 1<<10), subset: &empty})
	if got := ir.GetStatus().GetCode(); got != 503 {
		t.Errorf("empty subset: status %d, want 503", got)
	}
}

func (s *suite) testSubsetNoneEligible(t *testing.T) {
	outside := []string{"192.0.2.1:8000", "192.0.2.2:8000"} // TEST-NET-1: never in a pool
	ir := s.refusal(t, request{body: chatBody("outside-subset", 1<<10), subset: &outside})
	if got := ir.GetStatus().GetCode(); got != 503 {
		t.Errorf("subset outside the pool: status %d, want 503", got)
	}
}

func (s *suite) testShed(t *testing.T) {
	if s.tg.ShedHeaders == nil {
		t.Skip("the target cannot provoke shedding")
	}
	ir := s.refusal(t, request{headers: s.tg.ShedHeaders, body: chatBody("shed", 1<<10)})
	if got := ir.GetStatus().GetCode(); got != 429 {
		t.Errorf("shed: status %d, want 429", got)
	}
	if immediateHeader(ir, s.tg.RefusalReasonHeader) == "" {
		t.Errorf("shed: no reason in %s", s.tg.RefusalReasonHeader)
	}
}

// testCapacity fills the EPP to its capacity with picks whose streams stay
// open (the requests are in flight), expects one more to be shed with 429
// and a reason, then ends the held streams as a proxy does. It runs three
// rounds: a pick whose stream ended must give its capacity back, or the
// next round is shed before it is full.
func (s *suite) testCapacity(t *testing.T) {
	if s.tg.Capacity <= 0 {
		t.Skip("the target has no capacity to saturate")
	}
	const rounds = 3
	for round := range rounds {
		var held []*stream
		var served []string
		for k := range s.tg.Capacity {
			st, p, err := s.holdPick(s.ctx(t), request{body: chatBody(fmt.Sprintf("capacity%d-%d", round, k), 1<<10)})
			if err != nil {
				t.Fatalf("round %d: pick %d of %d: %v", round, k+1, s.tg.Capacity, err)
			}
			held = append(held, st)
			served = append(served, p.endpoints[0])
		}
		ir := s.refusal(t, request{body: chatBody(fmt.Sprintf("capacity%d-over", round), 1<<10)})
		if got := ir.GetStatus().GetCode(); got != 429 {
			t.Errorf("round %d: pick over capacity: status %d, want 429", round, got)
		}
		if immediateHeader(ir, s.tg.RefusalReasonHeader) == "" {
			t.Errorf("round %d: pick over capacity: no reason in %s", round, s.tg.RefusalReasonHeader)
		}
		for k, st := range held {
			st.sendAsync(responseMessages(served[k], 200, nil), true)
			resps, err := st.recvAll()
			if serr := st.sendDone(); err == nil {
				err = serr
			}
			if err != nil {
				t.Fatalf("round %d: ending held stream %d: %v after %s", round, k, err, describe(resps))
			}
		}
	}
	s.settled(t)
}

// holdPick sends a whole request and reads its request-phase answers (the
// pick, then the chunks up to end_of_stream), leaving the stream open (the
// request in flight) for the caller to end.
func (s *suite) holdPick(ctx context.Context, r request) (*stream, pick, error) {
	st, err := open(ctx, s.cc)
	if err != nil {
		return nil, pick{}, err
	}
	st.sendAsync(r.messages(), false)
	var resps []*extprocv3.ProcessingResponse
	for {
		a, err := st.recv()
		if err != nil {
			return nil, pick{}, fmt.Errorf("request phase: %w after %s", err, describe(resps))
		}
		resps = append(resps, a)
		if a.GetImmediateResponse() != nil || a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			break
		}
	}
	if err := st.sendDone(); err != nil {
		return nil, pick{}, err
	}
	p, err := checkRequestPhase(resps, r, s.tg.Pool)
	return st, p, err
}

func (s *suite) testUnavailable(t *testing.T) {
	if s.tg.UnavailableHeaders == nil {
		t.Skip("the target cannot provoke an empty pool")
	}
	ir := s.refusal(t, request{headers: s.tg.UnavailableHeaders, body: chatBody("unavailable", 1<<10)})
	if got := ir.GetStatus().GetCode(); got != 503 {
		t.Errorf("no ready endpoint: status %d, want 503", got)
	}
}

// conversation renders turn k of conversation c: a long system prompt unique
// to c, then the turns so far. Later turns extend earlier ones.
func conversation(c, k int) []byte {
	var b strings.Builder
	b.WriteString(`{"messages":[{"content":"`)
	b.WriteString(filler(fmt.Sprintf("conversation%d system", c), 2048))
	b.WriteString(`","role":"system"}`)
	for i := 0; i <= k; i++ {
		fmt.Fprintf(&b, `,{"content":"question %d of conversation %d","role":"user"}`, i, c)
		if i < k {
			fmt.Fprintf(&b, `,{"content":"answer %d","role":"assistant"}`, i)
		}
	}
	b.WriteString(`],"model":"conformance"}`)
	return []byte(b.String())
}

func (s *suite) testAffinity(t *testing.T) {
	if !s.tg.Affinity {
		t.Skip("the target does not claim prefix affinity")
	}
	const conversations, turns = 16, 6
	primaries := map[string]bool{}
	for c := range conversations {
		var first string
		for k := range turns {
			p, err := s.pickOK(t, request{body: conversation(c, k)})
			if err != nil {
				t.Fatalf("conversation %d turn %d: %v", c, k, err)
			}
			if k == 0 {
				first = p.endpoints[0]
				primaries[first] = true
			} else if p.endpoints[0] != first {
				t.Errorf("conversation %d turn %d went to %s, earlier turns to %s", c, k, p.endpoints[0], first)
			}
		}
	}
	if len(primaries) < 2 {
		t.Errorf("%d conversations all went to %v: affinity that ignores the pool is not affinity", conversations, primaries)
	}
}

func (s *suite) testServed(t *testing.T) {
	// The request phase: the pick, then the chunks up to end_of_stream.
	st, p, err := s.holdPick(s.ctx(t), request{body: chatBody("served", 40_000)})
	if err != nil {
		t.Fatal(err)
	}
	served := p.endpoints[len(p.endpoints)-1] // as if the proxy fell back to the last one
	sse := [][]byte{[]byte("data: {\"choices\":[]}\n\n"), []byte("data: {\"choices\":[]}\n\n"), []byte("data: [DONE]\n\n")}
	st.sendAsync(responseMessages(served, 200, sse), true)
	resps, err := st.recvAll()
	if serr := st.sendDone(); err == nil {
		err = serr
	}
	if err != nil {
		t.Fatalf("response phase ended with %v after %s", err, describe(resps))
	}
	if len(resps) != 1+len(sse) || resps[0].GetResponseHeaders() == nil {
		t.Fatalf("response phase: want the headers answer and %d body answers, got %s", len(sse), describe(resps))
	}
	var got bytes.Buffer
	for _, a := range resps[1:] {
		sr := a.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			t.Fatalf("response body answer %T is not streamed", a.GetResponse())
		}
		got.Write(sr.GetBody())
	}
	if want := bytes.Join(sse, nil); !bytes.Equal(got.Bytes(), want) {
		t.Errorf("response body re-emitted as %q, want %q", got.Bytes(), want)
	}
	if s.tg.Served == nil {
		return
	}
	deadline := time.Now().Add(bound)
	for !contains(s.tg.Served(), served) {
		if time.Now().After(deadline) {
			t.Fatalf("served report %q never reached the picker (saw %q)", served, s.tg.Served())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *suite) testConcurrency(t *testing.T) {
	// A few connections, as Envoy's workers would hold, many streams each.
	const conns = 4
	ccs := make([]*grpc.ClientConn, conns)
	closeAll := func() {
		for _, cc := range ccs {
			if cc != nil {
				cc.Close()
			}
		}
	}
	defer closeAll()
	for i := range ccs {
		cc, err := extprocclient.Dial(s.tg.Addr)
		if err != nil {
			t.Fatal(err)
		}
		ccs[i] = cc
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []string
	)
	for i := range s.tg.Streams {
		wg.Go(func() {
			sub := &suite{tg: s.tg, cc: ccs[i%conns]}
			r := request{body: chatBody(fmt.Sprintf("concurrent%d", i), 1<<10)}
			resps, err := sub.roundTrip(s.ctx(t), r)
			if err == nil {
				_, err = checkRequestPhase(resps, r, s.tg.Pool)
			}
			if err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("stream %d: %v", i, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Errorf("%d of %d concurrent streams failed; first: %s", len(failed), s.tg.Streams, failed[0])
	}
	closeAll() // the extra connections are the suite's, not the EPP's
	s.settled(t)
}

func (s *suite) testCancellation(t *testing.T) {
	const rounds = 20
	for range rounds {
		// Cancelled before anything was sent.
		ctx, cancel := context.WithCancel(s.ctx(t))
		if st, err := open(ctx, s.cc); err == nil {
			cancel()
			if _, err := st.recvAll(); status.Code(err) != codes.Canceled {
				t.Errorf("cancelled empty stream ended with %v, want Canceled", err)
			}
		}
		cancel()

		// Cancelled mid-body, while the EPP holds its answer.
		ctx, cancel = context.WithCancel(s.ctx(t))
		st, err := open(ctx, s.cc)
		if err != nil {
			t.Fatal(err)
		}
		msgs := request{body: chatBody("cancel-mid-body", 64<<10)}.messages()
		st.sendAsync(msgs[:len(msgs)-1], false) // never the last chunk
		if err := st.sendDone(); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := st.recvAll(); status.Code(err) != codes.Canceled {
			t.Errorf("stream cancelled mid-body ended with %v, want Canceled", err)
		}

		// Cancelled after the pick, while the response streams.
		ctx, cancel = context.WithCancel(s.ctx(t))
		st, err = open(ctx, s.cc)
		if err != nil {
			t.Fatal(err)
		}
		st.sendAsync(request{headers: map[string]string{":method": "GET"}}.messages(), false)
		if a, err := st.recv(); err != nil || a.GetRequestHeaders() == nil {
			t.Fatalf("bodiless request: %v %T", err, a.GetResponse())
		}
		if err := st.sendDone(); err != nil {
			t.Fatal(err)
		}
		resp := responseMessages("", 200, [][]byte{[]byte("data: x\n\n"), []byte("data: y\n\n")})
		st.sendAsync(resp[:2], false)
		if a, err := st.recv(); err != nil || a.GetResponseHeaders() == nil {
			t.Fatalf("response headers: %v %T", err, a.GetResponse())
		}
		if err := st.sendDone(); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := st.recvAll(); status.Code(err) != codes.Canceled {
			t.Errorf("stream cancelled mid-response ended with %v, want Canceled", err)
		}
	}
	if _, err := s.pickOK(t, request{body: chatBody("after-cancel", 1<<10)}); err != nil {
		t.Fatalf("after cancellations: %v", err)
	}
	s.settled(t)
}

func (s *suite) testMalformed(t *testing.T) {
	hdrs := request{body: []byte("{}")}.messages()[0]
	hdrsEOS := request{}.messages()[0]
	trailers := request{body: []byte("{}"), trailers: true}.messages()[2]
	respHdrs := responseMessages("", 200, nil)[0]
	cases := []struct {
		name string
		msgs []*extprocv3.ProcessingRequest
		r    *request // instead of msgs
		// pickFirst: the stream was valid up to a point after the pick, so one
		// pick answer may precede the failure.
		pickFirst bool
		// mayEndOK: the proxy gave up (half-close) rather than broke a rule, so
		// an OK end without answers is also clean.
		mayEndOK bool
	}{
		{name: "body before headers", msgs: []*extprocv3.ProcessingRequest{extprocclient.RequestBodyMessage([]byte("{}"), true)}},
		{name: "headers twice", msgs: []*extprocv3.ProcessingRequest{hdrs, hdrs}},
		{name: "response headers before the request ended", msgs: []*extprocv3.ProcessingRequest{hdrs, respHdrs}},
		{name: "empty message", msgs: []*extprocv3.ProcessingRequest{{}}},
		{name: "subset hint not a list", r: &request{body: []byte("{}"), badHint: true}},
		{name: "trailers after a bodiless request", msgs: []*extprocv3.ProcessingRequest{hdrsEOS, trailers}, pickFirst: true},
		{name: "closed mid-body", msgs: []*extprocv3.ProcessingRequest{hdrs, extprocclient.RequestBodyMessage([]byte("{"), false)}, mayEndOK: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := request{}
			var resps []*extprocv3.ProcessingResponse
			var err error
			if tc.r != nil {
				r = *tc.r
				resps, err = s.roundTrip(s.ctx(t), r)
			} else {
				st, oerr := open(s.ctx(t), s.cc)
				if oerr != nil {
					t.Fatal(oerr)
				}
				st.sendAsync(tc.msgs, true)
				resps, err = st.recvAll()
				if serr := st.sendDone(); err == nil {
					err = serr
				}
			}
			if tc.pickFirst && len(resps) > 0 && resps[0].GetRequestHeaders() != nil {
				resps = resps[1:]
			}
			for _, a := range resps {
				if a.GetRequestHeaders() != nil {
					t.Fatalf("a malformed stream got a pick: %s", describe(resps))
				}
			}
			refused := len(resps) == 1 && resps[0].GetImmediateResponse().GetStatus().GetCode() >= 400
			switch {
			case err != nil && status.Code(err) != codes.OK:
			case refused:
			case tc.mayEndOK && len(resps) == 0:
			default:
				t.Errorf("want a non-OK status or a 4xx/5xx ImmediateResponse; got %v after %s", err, describe(resps))
			}
		})
	}
	if s.tg.HealthAddr != "" {
		s.testHealth(t)
	}
	if _, err := s.pickOK(t, request{body: chatBody("after-malformed", 1<<10)}); err != nil {
		t.Fatalf("after malformed streams: %v", err)
	}
	s.settled(t)
}
