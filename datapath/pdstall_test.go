package datapath

import (
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// TestPDSSEStalledClientEndsAtStreamCap: as TestSSEStalledClientEndsAtStreamCap,
// through a P/D rule. The decode engine floods a streamed answer, the client
// keeps its connection open and reads nothing; the rule's stream cap must
// end the decode relay (and so the decode leg's connection), which a cap
// that bounds only the engine side cannot do while the relay is blocked
// writing to the client.
func TestPDSSEStalledClientEndsAtStreamCap(t *testing.T) {
	pre := startPDFake(t, pdfake.VLLM, pdfake.Prefill, "127.0.0.20:0", 0)
	rt, _ := newTestRuntime(t, pdTestOptions()) // before the engine: its goroutine check runs after the engine closes
	dec, engineDone := startFloodingEngine(t, rawSSEHead, sseChunk("data: "+strings.Repeat("x", 1000)+"\n\n"))
	dep := epFor(t, dec.addr, 1)
	dep.Role = spec.RoleDecode
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pre.Endpoint(), dep)
	r.Engine, r.PD = spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
	r.MaxStreamDuration = 500 * time.Millisecond
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	sendStalled(t, ruleURL(r), sseRequest(pathCompletions, pdBody(pathCompletions, true, "")))
	waitEngineDone(t, engineDone, 10*time.Second, "stream cap 500ms")
}

// TestPDSSEWriteBoundClearedForNextRequest: as
// TestSSEWriteBoundClearedForNextRequest, after a P/D stream.
func TestPDSSEWriteBoundClearedForNextRequest(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1, func(r *spec.Rule) {
		r.MaxStreamDuration = 300 * time.Millisecond
		r.AllowedPaths = []string{pathCompletions}
	})
	const n = 4000
	if got := writeBoundLeftBehind(t, ruleURL(f.rule)[len("http://"):], sseRequest(pathCompletions, pdBody(pathCompletions, true, "")), 500*time.Millisecond, n); got != n {
		t.Fatalf("%d of %d answers after the P/D stream came back", got, n)
	}
}
