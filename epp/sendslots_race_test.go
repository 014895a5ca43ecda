package epp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// streamIDPicker picks an endpoint named after the request's x-stream-id
// header, so every pick answer says which stream it belongs to.
type streamIDPicker struct{}

func (streamIDPicker) Pick(_ context.Context, r *Request) (Result, error) {
	return Result{Endpoints: []string{"10.9.9.9:" + r.Headers.Get("x-stream-id")}}, nil
}
func (streamIDPicker) Served(Outcome) {}

// Streams hand gRPC buffer lists that live in the stream (sendSlots) and
// bytes from the stream's slab and bodies; gRPC's writer reads them after
// SendMsg returns. Many concurrent streams over few connections, each with
// its own bytes and more answers than slots (both the slot and the
// allocating path), must each get back exactly their own pick and chunks;
// under -race a reused or shared slot would also be reported as a race.
func TestSendSlotsConcurrentStreams(t *testing.T) {
	const (
		conns     = 2
		streams   = 48 // per connection, all at once
		rounds    = 3  // exchanges per stream slot
		reqChunks = 3
		rspChunks = 5 // with the request's, more answers than sendSlotCount
	)
	addr, ctx := serveLoopback(t, DefaultOptions(), streamIDPicker{})
	var wg sync.WaitGroup
	errs := make(chan error, conns*streams)
	for c := range conns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					id := strconv.Itoa((c*streams+i)*rounds + r)
					if err := distinctExchange(ctx, cc, id, reqChunks, rspChunks); err != nil {
						errs <- fmt.Errorf("stream %s: %w", id, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// serveLoopback serves s's ext_proc on a loopback port until the test
// ends, and returns the address and a context that ends with the test
// (bounded, so a stuck stream fails instead of hanging).
func serveLoopback(t *testing.T, opts Options, p Picker) (string, context.Context) {
	t.Helper()
	s, err := New(opts, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return serveServer(t, s)
}

// serveServer serves s on loopback until the test ends.
func serveServer(t *testing.T, s *Server) (string, context.Context) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, lis, hlis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String(), ctx
}

// distinctExchange runs one request and response whose every chunk names
// the stream and its position, and checks each answer carries its own.
func distinctExchange(ctx context.Context, cc *grpc.ClientConn, id string, reqChunks, rspChunks int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx)
	if err != nil {
		return err
	}
	chunk := func(side string, n int) []byte {
		// Sizes differ per chunk so a chunk read from another stream's
		// bytes also shows up as a wrong length.
		return bytes.Repeat([]byte(fmt.Sprintf("<%s %s %d>", id, side, n)), 20+n*7)
	}
	if err := st.Send(withConfig(reqHeaders(map[string]string{":path": "/v1/completions", "x-stream-id": id}, false),
		extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED)); err != nil {
		return err
	}
	for n := range reqChunks {
		if err := st.Send(reqBody(string(chunk("req", n)), n == reqChunks-1)); err != nil {
			return err
		}
	}
	pick, err := st.Recv()
	if err != nil {
		return fmt.Errorf("pick: %w", err)
	}
	want := "10.9.9.9:" + id
	header := ""
	for _, o := range pick.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == HeaderDestination {
			header = string(o.GetHeader().GetRawValue())
		}
	}
	if header != want {
		return fmt.Errorf("pick header %q, want %q", header, want)
	}
	md := pick.GetDynamicMetadata().GetFields()[DefaultDestinationNamespace].GetStructValue().GetFields()[HeaderDestination].GetStringValue()
	if md != want {
		return fmt.Errorf("pick metadata %q, want %q", md, want)
	}
	for n := range reqChunks {
		a, err := st.Recv()
		if err != nil {
			return fmt.Errorf("request chunk %d: %w", n, err)
		}
		if got := a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody(); !bytes.Equal(got, chunk("req", n)) {
			return fmt.Errorf("request chunk %d came back as %.40q…", n, got)
		}
	}
	if err := st.Send(respHeaders("200", "", false)); err != nil {
		return err
	}
	if _, err := st.Recv(); err != nil {
		return fmt.Errorf("response headers answer: %w", err)
	}
	for n := range rspChunks {
		if err := st.Send(respBody(string(chunk("rsp", n)), n == rspChunks-1)); err != nil {
			return err
		}
		a, err := st.Recv()
		if err != nil {
			return fmt.Errorf("response chunk %d: %w", n, err)
		}
		if got := a.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody(); !bytes.Equal(got, chunk("rsp", n)) {
			return fmt.Errorf("response chunk %d came back as %.40q…", n, got)
		}
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("after the last answer: %v, want EOF", err)
	}
	return nil
}
