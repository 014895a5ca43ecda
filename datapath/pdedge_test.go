package datapath

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/infergate/infergate/spec"
)

// Client transfer state on every path of a P/D rule: the dialects' legs,
// the role-0 fallback and the plain relay. Each test drives a real Runtime
// over recording engines and asserts what the engines received.

// markerID is a client request id steering vLLM's connectors to 6.6.6.6.
const markerID = "___prefill_addr_6.6.6.6:5557___decode_addr_6.6.6.6:5558_0123456789abcdef0123456789abcdef"

// hostileFields are client transfer fields of every engine, all pointing at
// an attacker's address or ids (6.6.6.6 / 666) so any leak is easy to see.
const hostileFields = `,"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"6.6.6.6","remote_port":666},` +
	`"bootstrap_host":"6.6.6.6","bootstrap_port":666,"bootstrap_room":666,"disaggregated_params":{"ctx_request_id":666}`

// hostileNumber is hostileFields' number as a whole JSON value.
var hostileNumber = regexp.MustCompile(`:\s*"?666"?\s*[,}\]]`)

// leaked reports what of the hostile state an engine saw ("" none).
func leaked(header http.Header, body []byte) string {
	for _, id := range header.Values(HeaderRequestID) {
		if strings.Contains(id, "6.6.6.6") {
			return "request id " + id
		}
	}
	// The hostile numbers are whole JSON values (666), not digits inside a
	// minted id: a random transfer id may well contain "666".
	if s := string(body); strings.Contains(s, "6.6.6.6") || hostileNumber.MatchString(s) {
		return "body " + s
	}
	return ""
}

// recorder is an engine that records every request (any method, any path)
// and answers a model list or a completion.
type recorder struct {
	ln  net.Listener
	mu  sync.Mutex
	got []recorded
}

type recorded struct {
	method string
	header http.Header
	body   []byte
}

func startRecorder(t *testing.T, addr string) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{ln: ln}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.got = append(rec.got, recorded{method: r.Method, header: r.Header.Clone(), body: b})
		rec.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rec
}

func (r *recorder) endpoint(role spec.Role) spec.Endpoint {
	ap := r.ln.Addr().(*net.TCPAddr).AddrPort()
	return spec.Endpoint{ID: ap.String(), Addr: ap, Weight: 1, Role: role}
}

func (r *recorder) requests() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.got...)
}

// TestPDSplitPathTransferState: on the split path of every dialect a marker
// request id is refused before any leg, and client transfer fields never
// reach either leg (the engines see only the gateway's own).
func TestPDSplitPathTransferState(t *testing.T) {
	for _, engine := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM} {
		t.Run(string(engine), func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), engine, 1, 1)
			c := testClient()
			res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""), HeaderRequestID, markerID)
			if res.status != http.StatusBadRequest || errorCode(t, res.body) != CodeRequestIDReserved {
				t.Fatalf("marker id: got %d %s, want 400 %s", res.status, res.body, CodeRequestIDReserved)
			}
			if n := len(f.prefills[0].Records()) + len(f.decodes[0].Records()); n != 0 {
				t.Fatalf("a refused request reached the engines (%d legs)", n)
			}
			waitCounter(t, f.reg, "infergate_pd_client_transfer_state_total", map[string]string{"action": actionRequestIDRejected}, 1)

			// A second, hostile X-Request-Id value behind a benign one.
			req, err := http.NewRequest(http.MethodPost, f.url(pathCompletions), strings.NewReader(pdBody(pathCompletions, false, "")))
			if err != nil {
				t.Fatal(err)
			}
			req.Header["X-Request-Id"] = []string{"benign-id", markerID}
			if res := do(t, c, req); res.status != http.StatusBadRequest {
				t.Fatalf("second marker id value: got %d %s, want 400", res.status, res.body)
			}

			// vLLM also reads a body request_id (the header wins, but the
			// gateway does not rely on it).
			res = post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, `,"request_id":"`+markerID+`"`))
			if res.status != http.StatusBadRequest || errorCode(t, res.body) != CodeRequestIDReserved {
				t.Fatalf("marker body request_id: got %d %s, want 400 %s", res.status, res.body, CodeRequestIDReserved)
			}
			if n := len(f.prefills[0].Records()) + len(f.decodes[0].Records()); n != 0 {
				t.Fatalf("a refused request reached the engines (%d legs)", n)
			}

			// Every engine's fields at once: stripped, so even TRT-LLM (which
			// rejects unknown fields) serves the request.
			res = post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, hostileFields))
			if res.status != http.StatusOK {
				t.Fatalf("hostile fields: got %d %s, want 200 (fields stripped)", res.status, res.body)
			}
			waitCounter(t, f.reg, "infergate_pd_client_transfer_state_total", map[string]string{"action": actionFieldStripped}, 5)
			legs := append(f.prefills[0].Records(), f.decodes[0].Records()...)
			if len(legs) == 0 {
				t.Fatal("no leg reached the engines")
			}
			for _, l := range legs {
				if what := leaked(l.Header, l.Body); what != "" {
					t.Errorf("%s leg got the client's transfer state: %s", l.Path, what)
				}
				if l.Violation != "" {
					t.Errorf("engine saw a protocol violation: %s", l.Violation)
				}
			}
		})
	}
}

// TestPDRole0FallbackTransferState: with no usable pair the role-0 engine
// serves the request unsplit, and gets neither a marker id nor client
// transfer fields.
func TestPDRole0FallbackTransferState(t *testing.T) {
	f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1)
	whole := startEngine(t, "role0")
	next := *f.rule
	next.Generation++
	next.Endpoints = append(append([]spec.Endpoint(nil), f.rule.Endpoints...), epFor(t, whole.Addr(), 1))
	next.Endpoints[0].Weight = 0 // no usable prefill: no pair
	if err := f.rt.Install(f.rule, &next); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	res := post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""), HeaderRequestID, markerID)
	if res.status != http.StatusBadRequest || errorCode(t, res.body) != CodeRequestIDReserved {
		t.Fatalf("marker id on the fallback: got %d %s, want 400 %s", res.status, res.body, CodeRequestIDReserved)
	}
	res = post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, `,"request_id":"`+markerID+`"`))
	if res.status != http.StatusBadRequest || errorCode(t, res.body) != CodeRequestIDReserved {
		t.Fatalf("marker body request_id on the fallback: got %d %s, want 400 %s", res.status, res.body, CodeRequestIDReserved)
	}
	if n := len(whole.Requests()); n != 0 {
		t.Fatalf("the role-0 engine got %d refused requests", n)
	}
	res = post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, hostileFields), HeaderRequestID, "client-trace-1")
	if res.status != http.StatusOK {
		t.Fatalf("fallback: got %d %s", res.status, res.body)
	}
	got := whole.Requests()
	if len(got) != 1 {
		t.Fatalf("role-0 engine got %d requests, want 1", len(got))
	}
	if what := leaked(got[0].Header, got[0].Body); what != "" {
		t.Errorf("role-0 engine got the client's transfer state: %s", what)
	}
	if ids := got[0].Header.Values(HeaderRequestID); len(ids) != 1 || ids[0] != "client-trace-1" {
		t.Errorf("role-0 engine got request ids %q, want the client's one", ids)
	}
	waitCounter(t, f.reg, "infergate_pd_client_transfer_state_total", map[string]string{"action": actionFieldStripped}, 5)

	res = post(t, c, f.url(pathCompletions), `{"model":"fake-model","prompt":"p","kv_transfer_params":NaN}`)
	if res.status != http.StatusBadRequest {
		t.Errorf("non-JSON body on the fallback: got %d %s, want 400", res.status, res.body)
	}
	if n := len(whole.Requests()); n != 1 {
		t.Errorf("a body that cannot be checked reached the role-0 engine")
	}
}

// TestPDRelayTransferState: requests that are not split (GET /v1/models,
// with or without a body) reach one prefill with their own method, no
// marker id and no client transfer fields.
func TestPDRelayTransferState(t *testing.T) {
	rt, _ := newTestRuntime(t, pdTestOptions()) // first: its goroutine check runs after the engines close
	pre := startRecorder(t, "127.0.0.20:0")
	dec := startRecorder(t, "127.0.0.30:0")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, pre.endpoint(spec.RolePrefill), dec.endpoint(spec.RoleDecode))
	r.Engine = spec.EngineVLLM
	r.PD = &spec.PD{}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	get := func(body string, hdr ...string) result {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, ruleURL(r)+pathModels, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body == "" {
			req.Body = http.NoBody
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		return do(t, c, req)
	}
	if res := get("", HeaderRequestID, markerID); res.status != http.StatusBadRequest || errorCode(t, res.body) != CodeRequestIDReserved {
		t.Fatalf("marker id on the relay: got %d %s, want 400 %s", res.status, res.body, CodeRequestIDReserved)
	}
	if res := get(`{"request_id":"` + markerID + `"}`); res.status != http.StatusBadRequest || errorCode(t, res.body) != CodeRequestIDReserved {
		t.Fatalf("marker body request_id on the relay: got %d %s, want 400 %s", res.status, res.body, CodeRequestIDReserved)
	}
	if n := len(pre.requests()) + len(dec.requests()); n != 0 {
		t.Fatalf("a refused relay reached the engines (%d)", n)
	}
	if res := get(""); res.status != http.StatusOK || !strings.Contains(res.body, `"object":"list"`) {
		t.Fatalf("body-less GET: got %d %s", res.status, res.body)
	}
	if res := get(`{"model":"fake-model"` + hostileFields + `}`); res.status != http.StatusOK || !strings.Contains(res.body, `"object":"list"`) {
		t.Fatalf("GET with a body: got %d %s", res.status, res.body)
	}
	got := pre.requests()
	if len(got) != 2 || len(dec.requests()) != 0 {
		t.Fatalf("prefill got %d, decode %d requests; want 2 relays to the prefill only", len(got), len(dec.requests()))
	}
	for i, g := range got {
		if g.method != http.MethodGet {
			t.Errorf("relay %d reached the engine as %s, want GET", i, g.method)
		}
		if what := leaked(g.header, g.body); what != "" {
			t.Errorf("relay %d leaked: %s", i, what)
		}
		if ids := g.header.Values(HeaderRequestID); len(ids) != 1 {
			t.Errorf("relay %d carried request ids %q, want exactly one", i, ids)
		}
	}
}

// TestPDRequestIDReservedCode: a marker request id (header or body) is
// refused before any leg on every P/D rule; a rule with a MoRI-IO endpoint
// answers SMG's code for it, others infergate's (the codes are spelled out:
// they are the wire contract).
func TestPDRequestIDReservedCode(t *testing.T) {
	moriio := func(r *spec.Rule) {
		for i := range r.Endpoints {
			r.Endpoints[i].PairFacts = map[string]string{spec.FactKVConnector: "MoRIIOConnector"}
			r.Endpoints[i].Labels = map[string]string{"moriio_mode": "read"}
		}
	}
	for _, tc := range []struct {
		name string
		mod  []func(*spec.Rule)
		want string
	}{
		{"nixl", nil, "request_id_reserved"},
		{"moriio", []func(*spec.Rule){moriio}, "moriio_request_id_reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPDFleet(t, pdTestOptions(), spec.EngineVLLM, 1, 1, tc.mod...)
			c := testClient()
			for _, res := range []result{
				post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, ""), HeaderRequestID, markerID),
				post(t, c, f.url(pathCompletions), pdBody(pathCompletions, false, `,"request_id":"`+markerID+`"`)),
			} {
				if res.status != http.StatusBadRequest || errorCode(t, res.body) != tc.want || res.header.Get(HeaderError) != tc.want {
					t.Fatalf("got %d %q %s, want 400 %s", res.status, res.header.Get(HeaderError), res.body, tc.want)
				}
			}
			if n := len(f.prefills[0].Records()) + len(f.decodes[0].Records()); n != 0 {
				t.Fatalf("a refused request reached the engines (%d legs)", n)
			}
			waitCounter(t, f.reg, "infergate_pd_client_transfer_state_total", map[string]string{"action": actionRequestIDRejected}, 2)
		})
	}
}
