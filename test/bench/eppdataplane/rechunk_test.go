package eppdataplane

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
)

// bufferingEPP answers as the GIE-derived pickers do: it buffers the whole
// request body, then sends the pick (echoing request headers, pseudo-headers
// included) and the (rewritten) body back in one
// streamed slice however many chunks it was handed, acknowledges the
// response path one answer per message, and ends the stream when the data
// plane half-closes.
type bufferingEPP struct {
	extprocv3.UnimplementedExternalProcessorServer
	dest    string
	rewrite func([]byte) []byte
}

func (e *bufferingEPP) Process(s extprocv3.ExternalProcessor_ProcessServer) error {
	var body []byte
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var out []*extprocv3.ProcessingResponse
		switch v := m.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, v.RequestBody.GetBody()...)
			if !v.RequestBody.GetEndOfStream() {
				continue
			}
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
					SetHeaders: []*corev3.HeaderValueOption{
						{Header: &corev3.HeaderValue{Key: "x-gateway-destination-endpoint", RawValue: []byte(e.dest)}},
						// It echoes the request's headers, pseudo-headers included.
						{Header: &corev3.HeaderValue{Key: ":path", RawValue: []byte("/v1/completions")}},
						{Header: &corev3.HeaderValue{Key: "Content-Length", RawValue: []byte("1")}},
					},
				}}},
			}}, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
					Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: e.rewrite(body), EndOfStream: true}},
				}}},
			}})
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}})
		default:
			continue // request headers: answered with the body
		}
		for _, r := range out {
			if err := s.Send(r); err != nil {
				return err
			}
		}
	}
}

// A picker that answers a body sent in several chunks with one streamed
// slice is followed (no wait for answers it never sends), its echoed
// pseudo-headers are not sent on as headers, and the engine gets the body
// the picker streamed back, as Envoy would forward it.
func TestDataPlaneFollowsARechunkingPicker(t *testing.T) {
	var got []byte
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		io.WriteString(w, "ok")
	}))
	defer engine.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, &bufferingEPP{
		dest:    strings.TrimPrefix(engine.URL, "http://"),
		rewrite: func(b []byte) []byte { return bytes.Replace(b, []byte(`"m"`), []byte(`"target"`), 1) },
	})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	front := serveFront(t, lis.Addr().String())

	prompt := strings.Repeat("word ", 10_000) // 50 kB: four chunks sent, one answered
	resp, err := http.Post(front+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"`+prompt+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(out) != "ok" {
		t.Fatalf("client got %d %q", resp.StatusCode, out)
	}
	if want := `{"model":"target","prompt":"` + prompt + `"}`; string(got) != want {
		t.Errorf("engine got %d bytes starting %.40q, want the picker's body (%d bytes)", len(got), got, len(want))
	}
}
