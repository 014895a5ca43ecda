package epp

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A body chunk is as large as the proxy makes it; the EPP's own limit is
// MaxBodyBytes. A chunk within it is picked and re-emitted whatever its
// size, and one beyond it is answered 413 like a body that grows past it
// chunk by chunk — not failed by gRPC's 4 MiB default message cap.
func TestLargeSingleChunk(t *testing.T) {
	const maxBody = 8 << 20
	opts := DefaultOptions()
	opts.MaxBodyBytes = maxBody
	addr, ctx := serveLoopback(t, opts, fixedPicker{twoEndpoints})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, tc := range []struct {
		size       int
		wantStatus int // 0: picked and re-emitted
	}{
		{1 << 20, 0},
		{5 << 20, 0},
		{maxBody, 0},
		{maxBody + 1, 413},
	} {
		t.Run(fmt.Sprintf("%dB", tc.size), func(t *testing.T) {
			if err := oneBigChunk(ctx, cc, tc.size, tc.wantStatus); err != nil {
				t.Error(err)
			}
		})
	}
}

func oneBigChunk(ctx context.Context, cc *grpc.ClientConn, size, wantStatus int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx)
	if err != nil {
		return err
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	if err := st.Send(withConfig(reqHeaders(map[string]string{":path": "/v1/completions"}, false),
		extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED)); err != nil {
		return err
	}
	if err := st.Send(reqBody(string(body), true)); err != nil {
		return err
	}
	first, err := st.Recv()
	if err != nil {
		return fmt.Errorf("first answer: %w", err)
	}
	if wantStatus != 0 {
		if got := int(first.GetImmediateResponse().GetStatus().GetCode()); got != wantStatus {
			return fmt.Errorf("answer %v, want an immediate %d", first, wantStatus)
		}
		return nil
	}
	if first.GetRequestHeaders() == nil {
		return fmt.Errorf("first answer is not the pick: %.200v", first)
	}
	a, err := st.Recv()
	if err != nil {
		return fmt.Errorf("re-emitted chunk: %w", err)
	}
	if got := a.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody(); !bytes.Equal(got, body) {
		return fmt.Errorf("re-emitted %d bytes, want the %d sent", len(got), len(body))
	}
	return nil
}

func TestMaxRecvMsgSize(t *testing.T) {
	for _, tc := range []struct {
		maxBody int64
		want    int
	}{
		{1, 4 << 20},
		{3 << 20, 4 << 20},
		{32 << 20, 33 << 20},
		{math.MaxInt64, math.MaxInt32},
	} {
		if got := maxRecvMsgSize(tc.maxBody); got != tc.want {
			t.Errorf("maxRecvMsgSize(%d) = %d, want %d", tc.maxBody, got, tc.want)
		}
	}
}
