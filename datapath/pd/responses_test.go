package pd_test

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// TestResponsesStreamEnds: a Responses API stream whose decode dies or
// stalls after its first bytes ends with the API's own error event, never
// a chat-style [DONE] (the SDKs would take that as a clean end).
func TestResponsesStreamEnds(t *testing.T) {
	body := `{"model":"m","input":"hello","max_output_tokens":8,"stream":true}`
	for _, engine := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang} {
		for _, tc := range []struct {
			fault pdfake.Fault
			code  string
		}{
			{pdfake.FaultDropAfterFirstByte, pd.CodeDecodeDied},
			{pdfake.FaultStall, pd.CodeDecodeTimeout},
		} {
			t.Run(string(engine)+"/"+string(tc.fault), func(t *testing.T) {
				f := startFleet(t, engine)
				d, ok := pd.New(engine, shortOptions())
				if !ok {
					t.Fatal("no dialect")
				}
				f.dec.Inject(tc.fault, 1)
				r := f.do(t, d, "/v1/responses", body, pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, 0)
				if strings.Contains(r.body, "[DONE]") {
					t.Fatalf("a Responses stream got [DONE]: %q", r.body)
				}
				want := "event: error\ndata: {\"type\":\"error\",\"code\":\"" + tc.code + "\""
				if !strings.Contains(r.body, want) {
					t.Fatalf("stream lacks %q: %q", want, r.body)
				}
			})
		}
	}
}
