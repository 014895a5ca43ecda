package datapath

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/infergate/infergate/datapath/upstream"
	"github.com/infergate/infergate/metrics"
	"github.com/infergate/infergate/spec"
)

// mapHeadSender is a Sender that drops its leg's List, so the Client
// writes the engine's head from the header map: the path every request
// took before the list.
type mapHeadSender struct{ next upstream.Sender }

func (s mapHeadSender) Send(ctx context.Context, leg upstream.Leg) (*http.Response, error) {
	leg.Header = leg.Header.Clone()
	leg.List.SetInto(leg.Header)
	leg.List = upstream.HeadList{}
	return s.next.Send(ctx, leg)
}

// mintedID is a request id the gateway minted, on an engine's head line.
var mintedID = regexp.MustCompile(`(?m)^X-Request-Id: [0-9a-f]{32}\r$`)

// sortedHead is an engine head with its field lines sorted (the order of
// names is the one thing the list may change) and a minted request id
// replaced by a mark (two runs mint two ids).
func sortedHead(head string) string {
	head = mintedID.ReplaceAllString(head, "X-Request-Id: <minted>\r")
	lines := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
	slices.Sort(lines[1:])
	return strings.Join(lines, "\r\n")
}

// TestHeadListDifferential: the engine's request head written from h1's
// field list (upstream.Leg.List) is, up to the order of names, the head
// written from the header map, for every shape of client head: repeated
// names, hop-by-hop fields and fields a Connection names, client request
// ids kept, too long, repeated or empty, X-Forwarded-For trusted or not,
// names in any case, padded values, more fields than the list holds. A
// head of distinct names keeps the client's order (the list was used).
func TestHeadListDifferential(t *testing.T) {
	var many, sixteen strings.Builder
	for i := range 20 {
		many.WriteString("X-F" + strconv.Itoa(i) + ": v" + strconv.Itoa(i) + "\r\n")
		if i < 13 { // with Content-Type and Content-Length: 15 fields, X-Request-Id the 16th
			sixteen.WriteString("X-F" + strconv.Itoa(i) + ": v" + strconv.Itoa(i) + "\r\n")
		}
	}
	shapes := []struct {
		name, fields string
		ordered      []string // field names the engine must see in this order (the list ran; Content-Length is written last)
	}{
		{name: "none"},
		{name: "common names", fields: "Accept: */*\r\nUser-Agent: t\r\nAccept-Language: en\r\nCache-Control: no-cache\r\nOrigin: o\r\n",
			ordered: []string{"Content-Type", "Accept", "User-Agent", "Accept-Language", "Cache-Control", "Origin", "X-Request-Id", "X-Forwarded-For", "Content-Length"}},
		{name: "eight common names", fields: "Accept: */*\r\nUser-Agent: t\r\nAccept-Language: en\r\nCache-Control: no-cache\r\nOrigin: o\r\nReferer: r\r\n",
			ordered: []string{"Content-Type", "Accept", "Origin", "Referer", "Content-Length"}},
		{name: "nine common names", fields: "Accept: */*\r\nUser-Agent: t\r\nAccept-Language: en\r\nCache-Control: no-cache\r\nOrigin: o\r\nReferer: r\r\nAuthorization: a\r\n"},
		{name: "other names", fields: "X-A: 1\r\nX-B: 2\r\nAccept: */*\r\nUser-Agent: t\r\nX-C: 3\r\nX-D: 4\r\nX-E: 5\r\n"},
		{name: "lower case common names", fields: "accept: */*\r\nuser-agent: t\r\n",
			ordered: []string{"Content-Type", "Accept", "User-Agent", "Content-Length"}},
		{name: "repeated name", fields: "X-Dup: 1\r\nX-Dup: 2\r\n"},
		{name: "repeated common name between others", fields: "Accept: a\r\nX-Other: 1\r\naccept: b\r\n"},
		{name: "Connection naming a field", fields: "Connection: x-named\r\nX-Named: 1\r\nX-Kept: 1\r\n"},
		{name: "keep-alive", fields: "Keep-Alive: timeout=5\r\nX-Kept: 1\r\n"},
		{name: "TE", fields: "TE: trailers\r\n"},
		{name: "client id", fields: "X-Request-Id: client-id-1\r\nAccept: a\r\n",
			ordered: []string{"Content-Type", "Accept", "X-Request-Id", "X-Forwarded-For", "Content-Length"}},
		{name: "client id lower case", fields: "x-request-id: lower-id\r\nuser-agent: t\r\n"},
		{name: "client id too long", fields: "X-Request-Id: " + strings.Repeat("i", maxClientRequestID+1) + "\r\n"},
		{name: "client id at the limit", fields: "X-Request-Id: " + strings.Repeat("i", maxClientRequestID) + "\r\n"},
		{name: "client id repeated", fields: "X-Request-Id: first\r\nX-Request-Id: second\r\n"},
		{name: "client id empty", fields: "X-Request-Id: \r\n"},
		{name: "client id empty then one", fields: "X-Request-Id: \r\nX-Request-Id: second\r\n"},
		{name: "forwarded for", fields: "X-Forwarded-For: 10.0.0.1\r\n"},
		{name: "forwarded for lower case", fields: "x-forwarded-for: 10.0.0.1, 10.0.0.2\r\n"},
		{name: "forwarded for twice", fields: "X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-For: 10.0.0.2\r\n"},
		{name: "padded values", fields: "X-Sp: \t padded \t \r\nX-Empty:\r\n"},
		{name: "sixteen fields", fields: sixteen.String() + "X-Request-Id: id-16\r\n"},
		{name: "more fields than the list holds", fields: many.String()},
	}
	for _, trust := range []bool{false, true} {
		t.Run("trust="+strconv.FormatBool(trust), func(t *testing.T) {
			var rts [2]*Runtime // 0: the list, 1: the map
			for i := range rts {
				o := testOptions()
				o.HTTPFrontEnd = FrontEndLean
				o.TrustForwardedFor = trust
				rts[i] = New(o, metrics.NewDatapath(prometheus.NewRegistry()), nil)
			}
			// One cleanup closes both, then checks for goroutines left
			// (after the engine's: registered before it).
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for _, rt := range rts {
					if err := rt.Close(ctx); err != nil {
						t.Errorf("Close: %v", err)
					}
				}
				assertNoDatapathGoroutines(t)
			})
			rts[1].sender = mapHeadSender{rts[1].sender}
			addr, heads := rawHopEngine(t)
			var gws [2]string
			for i, rt := range rts {
				r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, addr, 1))
				if err := rt.Install(nil, r); err != nil {
					t.Fatal(err)
				}
				gws[i] = r.Key.ListenAddr().String()
			}
			for _, sh := range shapes {
				t.Run(sh.name, func(t *testing.T) {
					var got [2]string
					for i, gw := range gws {
						before := len(heads())
						if head, _ := hopExchange(t, gw, "", sh.fields); !strings.HasPrefix(head, "HTTP/1.1 200") {
							t.Fatalf("answer %q", head)
						}
						hs := heads()
						if len(hs) != before+1 {
							t.Fatalf("engine saw %d requests, want 1", len(hs)-before)
						}
						got[i] = hs[before]
					}
					if a, b := sortedHead(got[0]), sortedHead(got[1]); a != b {
						t.Fatalf("list and map heads differ:\nlist %q\nmap  %q", got[0], got[1])
					}
					if sh.ordered != nil {
						last := -1
						for _, name := range sh.ordered {
							at := strings.Index(got[0], "\r\n"+name+": ")
							if at <= last {
								t.Fatalf("%s out of the client's order in %q", name, got[0])
							}
							last = at
						}
					}
				})
			}
		})
	}
}
