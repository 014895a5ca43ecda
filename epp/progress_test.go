package epp

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// progressPicker is a recordingPicker that also hears the first chunk.
type progressPicker struct {
	recordingPicker
	first []Outcome
	late  bool // FirstChunk came after Served
}

func (p *progressPicker) FirstChunk(o Outcome) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.first = append(p.first, o)
	p.late = p.late || len(p.outcomes) > 0
}

func withContentType(m *extprocv3.ProcessingRequest, ct string) *extprocv3.ProcessingRequest {
	hm := m.GetResponseHeaders().GetHeaders()
	hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: "content-type", RawValue: []byte(ct)})
	return m
}

// TestFirstChunkProgress: a Progress picker hears the first response body
// chunk once, before Served, with what it needs to tell a streamed
// completion's first token from a body that arrives whole.
func TestFirstChunkProgress(t *testing.T) {
	sse := "text/event-stream; charset=utf-8"
	tests := []struct {
		name                   string
		respMode               extprocfilterv3.ProcessingMode_BodySendMode // 0: no protocol config
		msgs                   []*extprocv3.ProcessingRequest
		calls                  int
		eventStream, increment bool
	}{
		{"streamed SSE", 0, []*extprocv3.ProcessingRequest{
			withContentType(respHeaders("200", "", false), sse), respBody("data: a\n\n", false), respBody("data: [DONE]\n\n", true),
		}, 1, true, true},
		{"SSE media type in another case", 0, []*extprocv3.ProcessingRequest{
			withContentType(respHeaders("200", "", false), "Text/Event-Stream"), respBody("data: a\n\n", false), respBody("", true),
		}, 1, true, true},
		{"JSON body in one chunk", 0, []*extprocv3.ProcessingRequest{
			withContentType(respHeaders("200", "", false), "application/json"), respBody(`{"choices":[]}`, true),
		}, 1, false, false},
		{"SSE the proxy buffers", extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL, []*extprocv3.ProcessingRequest{
			withContentType(respHeaders("200", "", false), sse), respBody("data: a\n\n", false), respBody("", true),
		}, 1, true, false},
		{"response headers skipped", 0, []*extprocv3.ProcessingRequest{
			respBody("data: a\n\n", false), respBody("", true),
		}, 1, false, true},
		{"empty first chunk", 0, []*extprocv3.ProcessingRequest{
			withContentType(respHeaders("200", "", false), sse), respBody("", false), respBody("data: a\n\n", true),
		}, 1, true, false},
		{"no body", 0, []*extprocv3.ProcessingRequest{respHeaders("204", "", true)}, 0, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &progressPicker{recordingPicker: recordingPicker{result: twoEndpoints}}
			s, _ := newTestServer(t, p)
			d := drive(t, s)
			first := reqHeaders(map[string]string{":method": "GET"}, true)
			if tc.respMode != 0 {
				first = withConfig(first, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, tc.respMode)
			}
			d.feed(first)
			for _, m := range tc.msgs {
				d.feed(m)
			}
			if err := d.end(); err != nil {
				t.Fatal(err)
			}
			if len(p.first) != tc.calls || p.late || len(p.outcomes) != 1 {
				t.Fatalf("%d FirstChunk calls (after Served: %v), %d Served; want %d before the one Served", len(p.first), p.late, len(p.outcomes), tc.calls)
			}
			if tc.calls == 0 {
				return
			}
			o := p.first[0]
			if o.EventStream != tc.eventStream || o.Incremental != tc.increment || o.FirstBodyChunk <= 0 || o.Result.Endpoints[0] != twoEndpoints.Endpoints[0] {
				t.Fatalf("first chunk outcome %+v: want event stream %v, incremental %v, a positive time and the pick",
					o, tc.eventStream, tc.increment)
			}
			if served := p.outcomes[0]; served.EventStream != o.EventStream || served.Incremental != o.Incremental || !served.Complete {
				t.Fatalf("Served outcome %+v disagrees with the first chunk's %+v", served, o)
			}
		})
	}
}
