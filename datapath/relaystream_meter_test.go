package datapath

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/spec"
)

// TestSSEMeteringMatchesCopyPath relays the same chunked body as SSE (the
// in-wait relay) and as a plain body (the read-write copy loop), on a
// traced and an untraced runtime, and checks that what is metered is the
// same on every arm: the client's bytes, the endpoint's byte counter, the
// request's status and error code, and the access log's fields (durations
// aside).
func TestSSEMeteringMatchesCopyPath(t *testing.T) {
	events := []string{"data: {\"tok\":0}\n\n", "data: {\"tok\":1}\n\n", "data: [DONE]\n\n"}
	type outcome struct {
		body  string
		bytes uint64
		log   string
	}
	var want *outcome
	var wantArm string
	for _, traced := range []bool{false, true} {
		for _, ctype := range []string{"text/event-stream", "application/x-ndjson"} {
			arm := fmt.Sprintf("traced=%v %s", traced, ctype)
			t.Run(arm, func(t *testing.T) {
				o := testOptions()
				if traced {
					o.Tracing.Endpoint = startOTLPReceiver(t).srv.URL
				}
				rt, logs := jsonLogRuntime(t, o)
				e := startRawEngine(t, func(nc net.Conn) bool {
					_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Type: "+ctype+"\r\nTransfer-Encoding: chunked\r\n\r\n")
					var pieces []string
					for _, ev := range events {
						pieces = append(pieces, sseChunk(ev))
					}
					return writeApart(nc, 10*time.Millisecond, append(pieces, "0\r\n\r\n")...)
				})
				r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.addr, 1))
				if err := rt.Install(nil, r); err != nil {
					t.Fatal(err)
				}
				res := post(t, testClient(), ruleURL(r)+"/v1/completions", `{"stream":true}`)
				lines := logs.waitAccessLines(t, 1)
				st, _ := rt.Status(r.Key)
				var keep []string
				for k, v := range lines[0] {
					switch k {
					case "time", "duration_ms", "ttfb_ms", "upstream_ms", "request_id", "msg", "content_type",
						"endpoint", "vip", "trace_id": // per run
						continue
					case "ttft_ms": // a duration: present or not
						v = "present"
					}
					keep = append(keep, fmt.Sprintf("%s=%v", k, v))
				}
				got := &outcome{body: res.body, bytes: st.Endpoints[e.addr].Bytes, log: strings.Join(slices.Sorted(slices.Values(keep)), " ")}
				t.Logf("%+v", *got)
				if want == nil {
					want, wantArm = got, arm
					return
				}
				if *got != *want {
					t.Fatalf("metered\n %+v\nwhere %s metered\n %+v", *got, wantArm, *want)
				}
			})
		}
	}
}
