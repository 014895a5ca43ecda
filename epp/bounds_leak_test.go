package epp

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// failPicker fails every pick whose body starts with "FAIL" and answers
// any other at once.
type failPicker struct{}

func (failPicker) Pick(_ context.Context, r *Request) (Result, error) {
	if bytes.HasPrefix(r.Body, []byte("FAIL")) {
		return Result{}, errors.New("picker broke")
	}
	return twoEndpoints, nil
}

func (failPicker) Served(Outcome) {}

// hostile sends one misbehaving stream's messages and leaves it as a
// proxy would (cancelled, half-closed or waiting for its answer).
type hostile func(ctx context.Context, st extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc)

func sendBody(st extprocv3.ExternalProcessor_ProcessClient, body []byte, eos bool) {
	_ = st.Send(reqBody(string(body), eos))
}

func sendHeaders(st extprocv3.ExternalProcessor_ProcessClient, size int) {
	_ = st.Send(headersDeclaring(size))
}

// headersDeclaring is a streamed request's headers declaring a body of
// size bytes.
func headersDeclaring(size int) *extprocv3.ProcessingRequest {
	return withConfig(reqHeaders(map[string]string{":path": "/v1/completions", "content-length": strconv.Itoa(size)}, false),
		extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
}

// Every way a stream can end before or after its pick gives back the body
// budget and the stream slot it took, exactly once: after many hostile
// streams nothing is taken, and a body at the limit whose headers fill
// the rest of the budget still gets its pick (one leaked byte would refuse
// it 429).
func TestBoundsReturnAfterHostileStreams(t *testing.T) {
	const (
		maxBody = 64 << 10
		rounds  = 20
	)
	chunk := bytes.Repeat([]byte("x"), 16<<10)
	fail := append([]byte("FAIL"), chunk[4:]...)
	// The last request's headers take the room the budget must keep
	// beside a body at the limit (HeaderRoom), and a little more.
	padded := headersDeclaring(maxBody)
	hm := padded.GetRequestHeaders().GetHeaders()
	hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: "x-filler", RawValue: bytes.Repeat([]byte("h"), HeaderRoom)})
	opts := DefaultOptions()
	opts.MaxBodyBytes, opts.BodyBudgetBytes, opts.MaxStreams = maxBody, maxBody+headCost(padded), 4
	s, _, cc, ctx := boundedServer(t, opts, failPicker{})

	// open sends headers declaring a body of declared bytes, first and
	// then chunk, the stream's last body message when last.
	open := func(st extprocv3.ExternalProcessor_ProcessClient, declared int, first []byte, last bool) {
		sendHeaders(st, declared)
		sendBody(st, first, false)
		sendBody(st, chunk, last)
	}
	recvAll := func(st extprocv3.ExternalProcessor_ProcessClient) {
		for range 100 {
			if _, err := st.Recv(); err != nil {
				return
			}
		}
	}
	cases := []struct {
		name string
		run  hostile
	}{
		{"cancelled mid-body", func(_ context.Context, st extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc) {
			open(st, 3*len(chunk), chunk, false)
			cancel()
		}},
		{"half-closed mid-body", func(_ context.Context, st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) {
			open(st, 3*len(chunk), chunk, false)
			_ = st.CloseSend()
			recvAll(st)
		}},
		{"oversize body", func(_ context.Context, st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) {
			sendHeaders(st, 2*maxBody)
			for range 2 * maxBody / len(chunk) {
				sendBody(st, chunk, false)
			}
			recvAll(st)
		}},
		{"malformed mid-body", func(_ context.Context, st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) {
			open(st, 3*len(chunk), chunk, false)
			_ = st.Send(respHeaders("200", "", false))
			recvAll(st)
		}},
		{"trailers, then cancelled", func(_ context.Context, st extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc) {
			open(st, 2*len(chunk), chunk, false)
			_ = st.Send(reqTrailers())
			_, _ = st.Recv()
			cancel()
		}},
		{"pick fails", func(_ context.Context, st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) {
			open(st, 2*len(fail), fail, true)
			recvAll(st)
		}},
		{"picked, then cancelled", func(_ context.Context, st extprocv3.ExternalProcessor_ProcessClient, cancel context.CancelFunc) {
			open(st, 2*len(chunk), chunk, true)
			_, _ = st.Recv()
			cancel()
		}},
		{"picked, half-closed before the response", func(_ context.Context, st extprocv3.ExternalProcessor_ProcessClient, _ context.CancelFunc) {
			open(st, 2*len(chunk), chunk, true)
			_ = st.CloseSend()
			recvAll(st)
		}},
	}
	for round := range rounds {
		for _, tc := range cases {
			hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			st, err := extprocv3.NewExternalProcessorClient(cc).Process(hctx)
			if err != nil {
				cancel()
				t.Fatalf("round %d, %s: %v", round, tc.name, err)
			}
			tc.run(hctx, st, cancel)
			cancel()
		}
	}
	waitInUse(t, &s.bodies, 0)
	waitInUse(t, &s.streams, 0)
	full := openWithHeaders(ctx, t, cc, padded, maxBody, len(chunk))
	if err := full.finishPicked(ctx, maxBody); err != nil {
		t.Fatalf("a body of the whole budget after %d hostile streams: %v", rounds*len(cases), err)
	}
}

// A stream reserves body memory in step with the bytes it has sent, not
// with the length it declares: streams that declare large bodies and
// send a few bytes each cannot take the whole budget and have every other
// request refused 429 (a declared length is the client's word; a buffer
// presized to it is memory the client never sent).
func TestDeclaredLengthDoesNotStarveBudget(t *testing.T) {
	const (
		maxBody = 8 << 20
		liars   = 16 // each declares the largest body and sends two bytes
		small   = 16 << 10
	)
	opts := DefaultOptions()
	opts.MaxBodyBytes, opts.BodyBudgetBytes = maxBody, maxBody+HeaderRoom
	s, err := New(opts, failPicker{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ended []chan struct{}
	defer func() {
		cancel()
		for _, e := range ended {
			<-e
		}
	}()
	for range liars {
		f := &fakeStream{ctx: ctx, in: make(chan *extprocv3.ProcessingRequest, 3), recvs: make(chan struct{}, 8)}
		e := make(chan struct{})
		ended = append(ended, e)
		go func() { _ = s.Process(f); close(e) }()
		f.in <- headersDeclaring(maxBody)
		for _, b := range []string{"a", "b"} {
			f.in <- &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(b)[:1:1]}}} // as decoded: no spare capacity
		}
		// The fourth Recv comes once the second byte has been handled
		// (or sooner, when the stream was refused and ended).
		for range 4 {
			select {
			case <-f.recvs:
			case <-e:
			case <-time.After(30 * time.Second):
				t.Fatal("stream not handled within 30 s")
			}
		}
	}
	taken := s.bodies.inUse()
	t.Logf("%d streams that sent 2 bytes each hold %d B of the body budget", liars, taken)
	if limit := int64(liars * 1024); taken > limit {
		t.Errorf("%d streams that sent 2 bytes each hold %d B of the body budget, want at most %d", liars, taken, limit)
	}
	if !s.bodies.take(small) {
		t.Fatalf("a %d KiB body does not fit beside %d streams that sent 2 bytes each (%d B taken)", small>>10, liars, taken)
	}
	s.bodies.give(small)
}
