package epp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rawBytes is a client codec that sends its message's bytes as they are,
// so a test can put on the stream what no ProcessingRequest encodes to.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawBytes) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawBytes) Name() string { return "proto" }

// A message gRPC cannot hand over — bytes that are not a ProcessingRequest,
// or one message past the largest received — is a malformed stream, not a
// cancelled one: counting it as canceled would tell the operator that
// clients go away when a peer speaks the protocol wrong.
func TestUndecodableMessageCountedMalformed(t *testing.T) {
	cases := []struct {
		name string
		msg  []byte
		want codes.Code
	}{
		{"not a ProcessingRequest", []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x80}, codes.Internal},
		{"past the largest message", bytes.Repeat([]byte{0}, 5<<20), codes.ResourceExhausted},
	}
	opts := DefaultOptions()
	opts.MaxBodyBytes = 1 << 20 // largest message: gRPC's 4 MiB
	_, m, cc, ctx := boundedServer(t, opts, failPicker{})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			st, err := cc.NewStream(sctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true},
				"/envoy.service.ext_proc.v3.ExternalProcessor/Process", grpc.ForceCodec(rawBytes{}))
			if err != nil {
				t.Fatal(err)
			}
			if err := st.SendMsg(&tc.msg); err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			_ = st.CloseSend()
			var got []byte
			for err == nil {
				err = st.RecvMsg(&got)
			}
			if status.Code(err) != tc.want {
				t.Fatalf("stream ended with %v, want %v", err, tc.want)
			}
			// gRPC sends the status itself as the receive fails, before
			// the handler returns and counts the stream: wait until it is
			// counted under some result, then ask which.
			counted := func() float64 {
				return streamsCount(m, ResultMalformed) + streamsCount(m, ResultCanceled)
			}
			for deadline := time.Now().Add(30 * time.Second); counted() < float64(i+1); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("stream %d not counted within 30 s", i+1)
				}
			}
			if n := streamsCount(m, ResultMalformed); n != float64(i+1) {
				t.Errorf("malformed streams %v, want %d (canceled %v)", n, i+1, streamsCount(m, ResultCanceled))
			}
		})
	}
}
