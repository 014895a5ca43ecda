package pd_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/datapath/pd"
	"github.com/infergate/infergate/internal/pdfake"
	"github.com/infergate/infergate/spec"
)

// connectorFleet is a vLLM fleet whose engines speak one KV connector:
// prefill (127.0.0.2), an alternate prefill (127.0.0.3) and a decode
// (127.0.0.4), like three hosts.
func connectorFleet(t *testing.T, connector, mode string) *fleet {
	t.Helper()
	start := func(addr string, role pdfake.Role) *pdfake.Engine {
		cfg := pdfake.DefaultConfig(pdfake.VLLM, role)
		cfg.Addr, cfg.Connector, cfg.MoRIIOMode = addr, connector, mode
		e, err := pdfake.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		return e
	}
	f := &fleet{engine: spec.EngineVLLM}
	f.prefill = start("127.0.0.2:0", pdfake.Prefill)
	f.alt = start("127.0.0.3:0", pdfake.Prefill)
	f.dec = start("127.0.0.4:0", pdfake.Decode)
	f.rule = &spec.Rule{Name: "rule-" + connector, Engine: spec.EngineVLLM, Key: spec.Key{ModelName: "m"}, PD: &spec.PD{}}
	return f
}

// kvParams decodes a leg body's kv_transfer_params.
func kvParams(t *testing.T, body []byte) map[string]json.RawMessage {
	t.Helper()
	var b struct {
		KV map[string]json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("leg body: %v: %s", err, body)
	}
	return b.KV
}

// noViolations fails the test for any protocol violation an engine saw.
func noViolations(t *testing.T, engines ...*pdfake.Engine) {
	t.Helper()
	for _, e := range engines {
		for _, r := range e.Records() {
			if r.Violation != "" {
				t.Errorf("%s: violation %q: %s", e.AddrPort(), r.Violation, r.Body)
			}
		}
	}
}

// TestMooncakeSequence: the prefill leg carries a minted transfer id, the
// decode leg the same id with the prefill's engine id and bootstrap
// address (which the fake decode queries, as vLLM does), and neither leg's
// request id carries NIXL peer markers.
func TestMooncakeSequence(t *testing.T) {
	f := connectorFleet(t, pdfake.ConnectorMooncake, "")
	d := mustDialect(t, spec.EngineVLLM)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			before := len(f.prefill.Records())
			res := f.do(t, d, pathChat, clientBody(pathChat, stream), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, 0)
			if res.status != 200 || res.out.KVTransferFailed {
				t.Fatalf("client got %d (kv transfer failed %v): %s", res.status, res.out.KVTransferFailed, res.body)
			}
			p := waitLegs(t, f.prefill, before+1)[before]
			dl := waitLegs(t, f.dec, before+1)[before]
			pk, dk := kvParams(t, p.Body), kvParams(t, dl.Body)
			if string(pk["do_remote_decode"]) != "true" || len(pk["transfer_id"]) < 3 {
				t.Errorf("prefill params = %v", pk)
			}
			if string(dk["transfer_id"]) != string(pk["transfer_id"]) || string(dk["do_remote_prefill"]) != "true" {
				t.Errorf("decode params %v do not claim the prefill's transfer %s", dk, pk["transfer_id"])
			}
			wantAddr := fmt.Sprintf(`"http://127.0.0.2:%d"`, f.prefill.BootstrapPort())
			if string(dk["remote_bootstrap_addr"]) != wantAddr {
				t.Errorf("remote_bootstrap_addr = %s, want %s", dk["remote_bootstrap_addr"], wantAddr)
			}
			if got, want := string(dk["remote_engine_id"]), `"`+f.prefill.Endpoint().Labels["kv_engine_id"]+`"`; got != want {
				t.Errorf("remote_engine_id = %s, want %s", got, want)
			}
			for _, r := range []pdfake.Record{p, dl} {
				if id := r.Header.Get("X-Request-Id"); strings.Contains(id, "___") {
					t.Errorf("leg request id carries peer markers: %s", id)
				}
			}
			noViolations(t, f.prefill, f.dec)
		})
	}
}

// TestMooncakePrefillFailover: a failed prefill is retried on the
// alternate with a fresh transfer id, and the decode is sent to the
// alternate's bootstrap server and engine.
func TestMooncakePrefillFailover(t *testing.T) {
	f := connectorFleet(t, pdfake.ConnectorMooncake, "")
	f.prefill.Inject(pdfake.Fault500, 1)
	d := mustDialect(t, spec.EngineVLLM)
	pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint(), AltPrefill: []spec.Endpoint{f.alt.Endpoint()}}
	res := f.do(t, d, pathCompletions, clientBody(pathCompletions, false), pair, 0)
	if res.status != 200 || !res.out.PrefillFailover || res.out.KVTransferFailed {
		t.Fatalf("client got %d, outcome %+v: %s", res.status, res.out, res.body)
	}
	first := kvParams(t, waitLegs(t, f.prefill, 1)[0].Body)
	alt := kvParams(t, waitLegs(t, f.alt, 1)[0].Body)
	dk := kvParams(t, waitLegs(t, f.dec, 1)[0].Body)
	if string(first["transfer_id"]) == string(alt["transfer_id"]) {
		t.Errorf("the retry reused transfer id %s", alt["transfer_id"])
	}
	if string(dk["transfer_id"]) != string(alt["transfer_id"]) || !strings.Contains(string(dk["remote_bootstrap_addr"]), "127.0.0.3:") {
		t.Errorf("decode params %v do not name the alternate prefill", dk)
	}
	noViolations(t, f.alt, f.dec)
}

// TestMooncakeWithoutEngineID: a prefill whose engine id is unknown gets no
// leg (it would only hold blocks); the decode computes the prompt.
func TestMooncakeWithoutEngineID(t *testing.T) {
	f := connectorFleet(t, pdfake.ConnectorMooncake, "")
	p := f.prefill.Endpoint()
	p.Labels = nil
	res := f.do(t, mustDialect(t, spec.EngineVLLM), pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: p, Decode: f.dec.Endpoint()}, 0)
	if res.status != 200 || res.out.PrefillSkipped != pd.SkipNoEngineID || !res.out.KVTransferFailed {
		t.Fatalf("client got %d, outcome %+v", res.status, res.out)
	}
	if n := len(f.prefill.Records()); n != 0 {
		t.Errorf("prefill received %d legs", n)
	}
	if kv := kvParams(t, waitLegs(t, f.dec, 1)[0].Body); kv != nil {
		t.Errorf("decode got params %v", kv)
	}
}

// learnedIDs is an EngineIDSource over a fixed map.
type learnedIDs map[string]string

func (m learnedIDs) KVEngineID(id string) string { return m[id] }

// TestMooncakeLearnedEngineID: a prefill without a kv_engine_id label
// whose engine id was read from its bootstrap server's /query (the fake
// serves it, as vLLM's does) gets its leg, and the decode names that id;
// a label still wins over a learned id.
func TestMooncakeLearnedEngineID(t *testing.T) {
	f := connectorFleet(t, pdfake.ConnectorMooncake, "")
	p := f.prefill.Endpoint()
	label := p.Labels["kv_engine_id"]
	p.Labels = nil
	resp, err := http.Get(pd.MooncakeQueryURL(p))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id, ok := pd.ParseMooncakeQuery(body)
	if !ok || id != label {
		t.Fatalf("/query %s gave %q %v, want the engine's id %q", body, id, ok, label)
	}
	f.ids = learnedIDs{p.ID: id}
	d := mustDialect(t, spec.EngineVLLM)
	res := f.do(t, d, pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: p, Decode: f.dec.Endpoint()}, 0)
	if res.status != 200 || res.out.PrefillSkipped != "" || res.out.KVTransferFailed {
		t.Fatalf("client got %d, outcome %+v: %s", res.status, res.out, res.body)
	}
	if got := string(kvParams(t, waitLegs(t, f.dec, 1)[0].Body)["remote_engine_id"]); got != `"`+label+`"` {
		t.Errorf("remote_engine_id = %s, want the learned %q", got, label)
	}
	noViolations(t, f.prefill, f.dec)

	f.ids = learnedIDs{p.ID: "stale-id"}
	res = f.do(t, d, pathCompletions, clientBody(pathCompletions, false), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}, 0)
	if got := string(kvParams(t, waitLegs(t, f.dec, 2)[1].Body)["remote_engine_id"]); res.status != 200 || got != `"`+label+`"` {
		t.Errorf("with a label: %d, remote_engine_id = %s, want the label's %q", res.status, got, label)
	}
}

func TestParseMooncakeQuery(t *testing.T) {
	tests := map[string]string{ // body → id ("" = none)
		`{"0":{"engine_id":"prefill-engine-1"}}`:                 "prefill-engine-1",
		`{"0":{"engine_id":"a"},"1":{"engine_id":"b"}}`:          "a",
		`{"1":{"engine_id":"b"}}`:                                "",
		`{"0":{"engine_id":""}}`:                                 "",
		`{"0":{"engine_id":"two words"}}`:                        "",
		`{"0":{"engine_id":"` + strings.Repeat("x", 257) + `"}}`: "",
		`{"0":{"engine_id":7}}`:                                  "",
		`not json`:                                               "",
	}
	for body, want := range tests {
		if got, ok := pd.ParseMooncakeQuery([]byte(body)); got != want || ok != (want != "") {
			t.Errorf("%.60s: %q %v, want %q", body, got, ok, want)
		}
	}
}

// TestMoRIIOSequence: in both modes the prefill leg carries a minted
// transfer id, ignore_eos and (WRITE) the decode's side channel; the
// decode gets the prefill's checked handoff.
func TestMoRIIOSequence(t *testing.T) {
	for _, mode := range []string{"read", "write"} {
		t.Run(mode, func(t *testing.T) {
			f := connectorFleet(t, pdfake.ConnectorMoRIIO, mode)
			dec := f.dec.Endpoint()
			dec.Labels = map[string]string{"moriio_mode": mode, "tp_size": "2"}
			res := f.do(t, mustDialect(t, spec.EngineVLLM), pathCompletions, clientBody(pathCompletions, true), pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dec}, 0)
			if res.status != 200 {
				t.Fatalf("client got %d: %s", res.status, res.body)
			}
			pk := kvParams(t, waitLegs(t, f.prefill, 1)[0].Body)
			dk := kvParams(t, waitLegs(t, f.dec, 1)[0].Body)
			if string(pk["remote_tp_size"]) != "2" || string(pk["remote_dp_size"]) != "1" {
				t.Errorf("prefill params = %v, want the decode's TP 2 and DP 1", pk)
			}
			_, named := pk["remote_host"]
			if named != (mode == "write") {
				t.Errorf("%s prefill params name the decode side channel: %v", mode, pk)
			}
			if mode == "write" && (string(pk["remote_host"]) != `"127.0.0.4"` || string(pk["remote_handshake_port"]) != "6301" || string(pk["remote_notify_port"]) != "61005") {
				t.Errorf("write prefill params = %v", pk)
			}
			if string(dk["transfer_id"]) != string(pk["transfer_id"]) || string(dk["remote_host"]) != `"127.0.0.2"` {
				t.Errorf("decode params = %v, want the prefill's handoff for %s", dk, pk["transfer_id"])
			}
			noViolations(t, f.prefill, f.dec)
		})
	}
}

// TestMoRIIORefusals: every refusal is answered before any engine is
// contacted, or, for a bad handoff, before the decode is.
func TestMoRIIORefusals(t *testing.T) {
	good := `{"do_remote_prefill":true,"remote_engine_id":"10.0.0.2:6301","remote_block_ids":[1],"remote_host":"10.0.0.2","remote_handshake_port":6301,"remote_notify_port":"61005","transfer_id":"%s"}`
	tests := []struct {
		name     string
		path     string
		body     string
		prefill  func(f *fleet) spec.Endpoint
		decode   func(f *fleet) spec.Endpoint
		status   int
		code     string
		prefills int // legs the prefill engine may receive
	}{
		{name: "responses route", path: "/v1/responses", body: `{"model":"m","input":"hi"}`, status: 501, code: pd.CodeMoRIIORouteUnsupported},
		{name: "n 2", body: `{"model":"m","prompt":"p","n":2}`, status: 400, code: pd.CodeMoRIIOFanoutUnsupported},
		{name: "prompt list", body: `{"model":"m","prompt":["a","b"]}`, status: 400, code: pd.CodeMoRIIOFanoutUnsupported},
		{name: "prompt_embeds list", body: `{"model":"m","prompt_embeds":["AAAA","BBBB"]}`, status: 400, code: pd.CodeMoRIIOFanoutUnsupported},
		{name: "beam search", body: `{"model":"m","prompt":"p","use_beam_search":true}`, status: 400, code: pd.CodeMoRIIOFanoutUnsupported},
		{name: "mixed modes", decode: withLabels(func(f *fleet) spec.Endpoint { return f.dec.Endpoint() }, "moriio_mode", "write"), status: 503, code: pd.CodeMoRIIOPairMisconfigured},
		{name: "no mode", decode: withLabels(func(f *fleet) spec.Endpoint { return f.dec.Endpoint() }, "moriio_mode", ""), status: 503, code: pd.CodeMoRIIOPairMisconfigured},
		{name: "prefill not MoRI-IO", prefill: func(f *fleet) spec.Endpoint {
			p := f.prefill.Endpoint()
			p.PairFacts = map[string]string{spec.FactKVConnector: "NixlConnector"}
			return p
		}, status: 503, code: pd.CodeMoRIIOPairMisconfigured},
		{name: "DP not a number", decode: withLabels(func(f *fleet) spec.Endpoint { return f.dec.Endpoint() }, "dp_size", "two"), status: 503, code: pd.CodeMoRIIOPairMisconfigured},
		{name: "rank outside the reported DP size", prefill: func(f *fleet) spec.Endpoint {
			p := moriBad(t, strings.Replace(good, `"transfer_id"`, `"remote_dp_size":2,"remote_dp_rank":5,"transfer_id"`, 1))
			p.Labels["dp_size"] = "2"
			return p
		}, status: 502, code: pd.CodeMoRIIOHandoffInvalid, prefills: -1},
		{name: "bad port label", decode: withLabels(func(f *fleet) spec.Endpoint { return f.dec.Endpoint() }, "moriio_notify_port", "0"), status: 503, code: pd.CodeMoRIIOPairMisconfigured},
		{name: "concurrent dispatch", decode: withLabels(func(f *fleet) spec.Endpoint { return f.dec.Endpoint() }, "moriio_write_dispatch", "concurrent"), status: 503, code: pd.CodeMoRIIOPairMisconfigured},
		{name: "no handoff", prefill: func(f *fleet) spec.Endpoint { return moriBad(t, "null") }, status: 502, code: pd.CodeMoRIIOHandoffInvalid, prefills: -1},
		{name: "foreign transfer", prefill: func(f *fleet) spec.Endpoint { return moriBad(t, fmt.Sprintf(good, "xfer-other")) }, status: 502, code: pd.CodeMoRIIOHandoffInvalid, prefills: -1},
		{name: "prefill 500", prefill: func(f *fleet) spec.Endpoint { f.prefill.Inject(pdfake.Fault500, 1); return f.prefill.Endpoint() }, status: 500, prefills: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := connectorFleet(t, pdfake.ConnectorMoRIIO, "read")
			path, body := tc.path, tc.body
			if path == "" {
				path = pathCompletions
			}
			if body == "" {
				body = clientBody(path, false)
			}
			pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint(), AltDecode: []spec.Endpoint{f.alt.Endpoint()}}
			if tc.prefill != nil {
				pair.Prefill = tc.prefill(f)
			}
			if tc.decode != nil {
				pair.Decode = tc.decode(f)
			}
			res := f.do(t, mustDialect(t, spec.EngineVLLM), path, body, pair, 0)
			if res.status != tc.status || res.header.Get("X-Infergate-Error") != tc.code {
				t.Fatalf("client got %d %q, want %d %q: %s", res.status, res.header.Get("X-Infergate-Error"), tc.status, tc.code, res.body)
			}
			if tc.prefills >= 0 {
				time.Sleep(20 * time.Millisecond) // a stray leg would have arrived by now
				if n := len(f.prefill.Records()); n != tc.prefills {
					t.Errorf("prefill received %d legs, want %d", n, tc.prefills)
				}
			}
			if n := len(f.dec.Records()) + len(f.alt.Records()); n != 0 {
				t.Errorf("a decode received %d legs", n)
			}
			if res.out.KVTransferFailed {
				t.Errorf("outcome counts a recompute that never happens: %+v", res.out)
			}
		})
	}
}

// withLabels sets one label on the endpoint ep builds ("" deletes it).
func withLabels(ep func(*fleet) spec.Endpoint, k, v string) func(*fleet) spec.Endpoint {
	return func(f *fleet) spec.Endpoint {
		e := ep(f)
		e.Labels = maps.Clone(e.Labels)
		if e.Labels == nil {
			e.Labels = map[string]string{}
		}
		if v == "" {
			delete(e.Labels, k)
		} else {
			e.Labels[k] = v
		}
		return e
	}
}

// moriBad is a MoRI-IO read prefill that answers every request with params.
func moriBad(t *testing.T, params string) spec.Endpoint {
	ep := badPrefill(t, params)
	ep.PairFacts = map[string]string{spec.FactKVConnector: pdfake.ConnectorMoRIIO}
	ep.Labels = map[string]string{"moriio_mode": "read"}
	return ep
}

// TestMoRIIOReadDecodeFailover: in READ mode a decode that cannot be
// reached is replaced by another MoRI-IO decode of the same mode, never by
// one that would run without the handoff's mode.
func TestMoRIIOReadDecodeFailover(t *testing.T) {
	f := connectorFleet(t, pdfake.ConnectorMoRIIO, "read")
	dead := f.dec.Endpoint()
	_ = f.dec.Close()
	wrongMode := withLabels(func(*fleet) spec.Endpoint { return f.alt.Endpoint() }, "moriio_mode", "write")(f)
	good := pdfake.DefaultConfig(pdfake.VLLM, pdfake.Decode)
	good.Addr, good.Connector, good.MoRIIOMode = "127.0.0.6:0", pdfake.ConnectorMoRIIO, "read"
	g, err := pdfake.Start(good)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: dead, AltDecode: []spec.Endpoint{wrongMode, g.Endpoint()}}
	res := f.do(t, mustDialect(t, spec.EngineVLLM), pathCompletions, clientBody(pathCompletions, false), pair, 0)
	if res.status != 200 || !res.out.DecodeFailover {
		t.Fatalf("client got %d, outcome %+v: %s", res.status, res.out, res.body)
	}
	if n := len(f.alt.Records()); n != 0 {
		t.Errorf("the write-mode decode received %d legs", n)
	}
	waitLegs(t, g, 1)
	noViolations(t, f.prefill, g)
}

// TestSGLangPrefillDPRank: the prefill leg names the DP rank holding the
// prompt's KV and the room is congruent to it modulo the rule's ranks (a
// decode finds the prefill rank as room % dp_size); the decode leg names
// no rank. Without a known rank, neither leg names one.
func TestSGLangPrefillDPRank(t *testing.T) {
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprint("known=", known), func(t *testing.T) {
			f := startFleet(t, spec.EngineSGLang)
			f.rule.KV = &spec.KV{DPRanks: 4}
			pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint(), PrefillDPRank: 2, HasPrefillDPRank: known}
			res := f.do(t, mustDialect(t, spec.EngineSGLang), pathChat, clientBody(pathChat, false), pair, 0)
			if res.status != 200 {
				t.Fatalf("client got %d: %s", res.status, res.body)
			}
			type leg struct {
				Rank *int   `json:"data_parallel_rank"`
				Room uint64 `json:"bootstrap_room"`
			}
			var p, d leg
			if err := json.Unmarshal(waitLegs(t, f.prefill, 1)[0].Body, &p); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(waitLegs(t, f.dec, 1)[0].Body, &d); err != nil {
				t.Fatal(err)
			}
			if d.Rank != nil || p.Room != d.Room {
				t.Errorf("decode leg rank %v room %d, want none and the prefill's room %d", d.Rank, d.Room, p.Room)
			}
			switch {
			case known && (p.Rank == nil || *p.Rank != 2 || p.Room%4 != 2):
				t.Errorf("prefill leg rank %v room %d (mod 4 = %d), want rank 2 and room ≡ 2", p.Rank, p.Room, p.Room%4)
			case !known && p.Rank != nil:
				t.Errorf("prefill leg names rank %d without a known one", *p.Rank)
			}
		})
	}
}

// TestSGLangLogprobsMerge: a non-streamed request with return_logprob is
// answered with the prefill's input logprobs prepended to the decode's, as
// SGLang's router does; without the flag the decode's body is relayed.
func TestSGLangLogprobsMerge(t *testing.T) {
	f := startFleet(t, spec.EngineSGLang)
	d := mustDialect(t, spec.EngineSGLang)
	pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}
	res := f.do(t, d, pathCompletions, `{"model":"m","prompt":"p","max_tokens":4,"return_logprob":true}`, pair, 0)
	if res.status != 200 || res.header.Get("Content-Type") != "application/json" {
		t.Fatalf("client got %d %s: %s", res.status, res.header.Get("Content-Type"), res.body)
	}
	var got struct {
		Meta struct {
			LP json.RawMessage `json:"input_token_logprobs"`
		} `json:"meta_info"`
		Choices []json.RawMessage `json:"choices"`
	}
	if err := json.Unmarshal([]byte(res.body), &got); err != nil {
		t.Fatalf("body: %v: %s", err, res.body)
	}
	if string(got.Meta.LP) != `[[null,1,null],[-1.5,2,null],[-0.25,3,null]]` || len(got.Choices) != 1 {
		t.Errorf("merged body = %s", res.body)
	}
	plain := f.do(t, d, pathCompletions, `{"model":"m","prompt":"p","max_tokens":4}`, pair, 0)
	if plain.status != 200 || strings.Contains(plain.body, "meta_info") {
		t.Errorf("plain request: %d %s", plain.status, plain.body)
	}
}

// TestSGLangStreamedLogprobsMerge: a streamed request with return_logprob
// waits for the prefill's body and every decode event carrying
// meta_info.input_token_logprobs gets the prefill's prepended, as SGLang's
// router does; the stream still ends with [DONE], and without the flag the
// events are relayed untouched.
func TestSGLangStreamedLogprobsMerge(t *testing.T) {
	f := startFleet(t, spec.EngineSGLang)
	d := mustDialect(t, spec.EngineSGLang)
	pair := pd.Pair{Prefill: f.prefill.Endpoint(), Decode: f.dec.Endpoint()}
	res := f.do(t, d, pathCompletions, `{"model":"m","prompt":"p","max_tokens":4,"stream":true,"return_logprob":true}`, pair, 0)
	if res.status != 200 || !strings.HasPrefix(res.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("client got %d %s: %s", res.status, res.header.Get("Content-Type"), res.body)
	}
	events, merged := 0, 0
	for _, line := range strings.Split(res.body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		events++
		var ev struct {
			Meta struct {
				LP json.RawMessage `json:"input_token_logprobs"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if string(ev.Meta.LP) != `[[null,1,null],[-1.5,2,null],[-0.25,3,null]]` {
			t.Errorf("event input_token_logprobs = %s, want the prefill's two then the decode's one", ev.Meta.LP)
			continue
		}
		merged++
	}
	if events == 0 || merged != events || !strings.HasSuffix(res.body, "data: [DONE]\n\n") {
		t.Errorf("%d of %d events merged; body:\n%s", merged, events, res.body)
	}
	plain := f.do(t, d, pathCompletions, `{"model":"m","prompt":"p","max_tokens":4,"stream":true}`, pair, 0)
	if plain.status != 200 || strings.Contains(plain.body, "meta_info") || !strings.Contains(plain.body, "data: [DONE]") {
		t.Errorf("plain stream: %d %s", plain.status, plain.body)
	}
}
