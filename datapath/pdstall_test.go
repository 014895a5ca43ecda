package datapath

import (
	"io"
	"net"
	"strconv"
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
	engineDone := make(chan struct{})
	event := sseChunk("data: " + strings.Repeat("x", 1000) + "\n\n")
	dec := startRawEngine(t, func(nc net.Conn) bool {
		defer close(engineDone)
		_, _ = io.WriteString(nc, rawSSEHead)
		for range 100_000 { // 100 MB at most
			_ = nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(nc, event); err != nil {
				return false
			}
		}
		return false
	})
	dep := epFor(t, dec.addr, 1)
	dep.Role = spec.RoleDecode
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pre.Endpoint(), dep)
	r.Engine, r.PD = spec.EngineVLLM, &spec.PD{SessionTTL: time.Minute}
	r.MaxStreamDuration = 500 * time.Millisecond
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	cl, err := net.Dial("tcp", ruleURL(r)[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_ = cl.(*net.TCPConn).SetReadBuffer(4 << 10)
	body := pdBody(pathCompletions, true, "")
	if _, err := io.WriteString(cl, "POST "+pathCompletions+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case <-engineDone:
		t.Logf("the decode engine's connection ended %v after the request (cap 500ms)", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("a client that reads nothing held the P/D stream 10 s past a 500 ms stream cap")
	}
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
