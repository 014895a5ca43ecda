package datapath

import (
	"bufio"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/fakeengine"
	"github.com/infergate/infergate/spec"
)

// TestSinglePoolSurface drives a single-pool VIP with requests shaped like
// the OpenAI / Anthropic SDKs' (JSON bodies with Content-Type
// application/json, multipart uploads, streaming) and checks that each
// reaches the engine exactly once, byte for byte, and that the engine's
// status, content type and headers come back unchanged.
func TestSinglePoolSurface(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e1", func(o *fakeengine.Options) { o.Tokens = 3 })
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	base := ruleURL(r)
	tests := []struct {
		name, method, path, ct, body string
		status                       int
		wantCT                       string
		contains                     []string
		recorded                     bool // the engine records it (with the body byte for byte)
	}{
		{"completions", "POST", "/v1/completions", "application/json", `{"model":"m","prompt":"hi"}`, 200, "application/json", []string{`"text_completion"`}, true},
		{"chat stream", "POST", "/v1/chat/completions", "application/json", `{"model":"m","messages":[],"stream":true}`, 200, "text/event-stream", []string{"chat.completion.chunk", "data: [DONE]"}, true},
		{"responses", "POST", "/v1/responses", "application/json", `{"model":"m","input":"hi"}`, 200, "application/json", []string{`"object":"response"`, `"output_text"`}, true},
		{"responses stream", "POST", "/v1/responses", "application/json", `{"model":"m","input":"hi","stream":true}`, 200, "text/event-stream", []string{"event: response.created", "event: response.output_text.delta", "event: response.completed"}, true},
		{"messages", "POST", "/v1/messages", "application/json", `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, 200, "application/json", []string{`"type":"message"`, `"stop_reason":"end_turn"`}, true},
		{"messages stream", "POST", "/v1/messages", "application/json", `{"model":"m","max_tokens":8,"messages":[],"stream":true}`, 200, "text/event-stream", []string{"event: message_start", "event: content_block_delta", "event: message_stop"}, true},
		{"count tokens", "POST", "/v1/messages/count_tokens", "application/json", `{"model":"m","messages":[]}`, 200, "application/json", []string{`"input_tokens"`}, true},
		{"embeddings", "POST", "/v1/embeddings", "application/json", `{"model":"m","input":"hi"}`, 200, "application/json", []string{`"embedding"`}, true},
		{"tokenize", "POST", "/tokenize", "application/json", `{"model":"m","prompt":"hi"}`, 200, "application/json", []string{`"tokens"`}, true},
		{"detokenize", "POST", "/detokenize", "application/json", `{"model":"m","tokens":[1,2]}`, 200, "application/json", []string{`"prompt"`}, true},
		{"speech bytes", "POST", "/v1/audio/speech", "application/json", `{"model":"m","input":"hi","voice":"a"}`, 200, "audio/mpeg", []string{"ID3"}, true},
		{"version", "GET", "/version", "", "", 200, "application/json", []string{fakeengine.FakeVersion}, true},
		{"engine 404", "GET", "/no/such/path", "", "", 404, "application/json", []string{"not found"}, true},
		{"engine 405", "GET", "/v1/embeddings", "", "", 405, "application/json", []string{"method not allowed"}, true},
		{"engine 400 body", "POST", "/v1/embeddings", "application/json", `{not json`, 400, "application/json", []string{"invalid JSON"}, true},
		{"options", "OPTIONS", "/v1/completions", "", "", 204, "", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.Requests())
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(tc.method, base+tc.path, body)
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			req.Header.Set(HeaderRequestID, "sdk-"+tc.name)
			res := do(t, c, req)
			if got := res.header.Get(HeaderRequestID); got != "sdk-"+tc.name {
				t.Fatalf("X-Request-Id %q, want the client's", got)
			}
			if res.status != tc.status {
				t.Fatalf("status %d, want %d: %s", res.status, tc.status, res.body)
			}
			if h := res.header.Get(HeaderError); h != "" {
				t.Fatalf("gateway error %q on a forwarded request: %s", h, res.body)
			}
			if got := res.header.Get("Content-Type"); !strings.HasPrefix(got, tc.wantCT) {
				t.Fatalf("content type %q, want %q", got, tc.wantCT)
			}
			for _, s := range tc.contains {
				if !strings.Contains(res.body, s) {
					t.Fatalf("body lacks %q: %s", s, res.body)
				}
			}
			if tc.method == "OPTIONS" && res.header.Get("Allow") == "" {
				t.Fatalf("OPTIONS: the engine's Allow header was not relayed: %v", res.header)
			}
			reqs := e.Requests()[before:]
			if !tc.recorded {
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("engine received %d requests, want 1", len(reqs))
			}
			if got := reqs[0]; got.Method != tc.method || got.Path != tc.path || string(got.Body) != tc.body {
				t.Fatalf("engine got %s %s %q, want %s %s %q", got.Method, got.Path, got.Body, tc.method, tc.path, tc.body)
			}
			if got := reqs[0].RequestID; got != "sdk-"+tc.name {
				t.Fatalf("engine got X-Request-Id %q, want the client's", got)
			}
		})
	}

	t.Run("head", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodHead, base+"/health", nil)
		res := do(t, c, req)
		if res.status != 200 || res.body != "" {
			t.Fatalf("HEAD /health: %d %q", res.status, res.body)
		}
	})

	t.Run("retry-after relayed", func(t *testing.T) {
		e.SetStatus(http.StatusTooManyRequests)
		defer e.SetStatus(0)
		res := post(t, c, base+"/v1/completions", `{"prompt":"x"}`)
		if res.status != 429 || res.header.Get("Retry-After") != fakeengine.RetryAfter || res.header.Get(HeaderError) != "" {
			t.Fatalf("got %d Retry-After %q error %q: %s", res.status, res.header.Get("Retry-After"), res.header.Get(HeaderError), res.body)
		}
	})

	t.Run("websocket refused", func(t *testing.T) {
		before := len(e.Requests())
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/realtime?model=m", nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		res := do(t, c, req)
		if res.status != http.StatusNotImplemented || errorCode(t, res.body) != CodeUpgradeRefused {
			t.Fatalf("got %d %s", res.status, res.body)
		}
		if n := len(e.Requests()) - before; n != 0 {
			t.Fatalf("engine saw %d requests of a refused upgrade", n)
		}
	})

	t.Run("transcription upload", func(t *testing.T) {
		const size = 3<<20 + 17
		res := uploadTranscription(t, c, base, size, -1)
		if res.status != 200 || res.header.Get(fakeengine.HeaderUploadBytes) != strconv.Itoa(size) {
			t.Fatalf("upload: %d %v %s", res.status, res.header, res.body)
		}
		if !strings.Contains(res.body, `"text":"fake transcription of `+strconv.Itoa(size)+` bytes"`) {
			t.Fatalf("upload answer %s", res.body)
		}
	})
}

// uploadTranscription posts a multipart audio upload the way the OpenAI
// SDK does (fields model, response_format and a file part), streamed from a
// pipe so the client never holds it either. length ≥ 0 sets Content-Length
// (the SDK knows it); -1 sends it chunked.
func uploadTranscription(t *testing.T, c *http.Client, base string, size int, length int64) result {
	t.Helper()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		_ = mw.WriteField("model", "whisper-1")
		fw, err := mw.CreateFormFile("file", "speech.wav")
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		chunk := []byte(strings.Repeat("RIFFWAVE", 4096))
		for left := size; left > 0; {
			n := min(left, len(chunk))
			if _, err := fw.Write(chunk[:n]); err != nil {
				pw.CloseWithError(err)
				return
			}
			left -= n
		}
		pw.CloseWithError(mw.Close())
	}()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/audio/transcriptions", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if length >= 0 {
		req.ContentLength = length
	}
	return do(t, c, req)
}

// TestStreamedBodyLimits: a streamed body over MaxStreamedBodyBytes is 413
// (up front by Content-Length, or when the chunked count crosses it), a
// body cut short is 400, and neither feeds the engine's breaker.
func TestStreamedBodyLimits(t *testing.T) {
	o := testOptions()
	o.MaxStreamedBodyBytes = 1 << 20
	o.MaxBodyBytes = 4 << 10 // far below the upload: only a streamed body gets through
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	if res := uploadTranscription(t, c, ruleURL(r), 512<<10, -1); res.status != 200 {
		t.Fatalf("upload under the streaming limit, over MaxBodyBytes: %d %s", res.status, res.body)
	}
	res := uploadTranscription(t, c, ruleURL(r), 2<<20, -1)
	if res.status != http.StatusRequestEntityTooLarge || errorCode(t, res.body) != CodeBodyTooLarge {
		t.Fatalf("chunked over the limit: %d %s", res.status, res.body)
	}
	req, _ := http.NewRequest(http.MethodPost, ruleURL(r)+"/v1/audio/transcriptions", strings.NewReader(strings.Repeat("x", 2<<20)))
	req.Header.Set("Content-Type", "application/octet-stream")
	res = do(t, c, req)
	if res.status != http.StatusRequestEntityTooLarge || errorCode(t, res.body) != CodeBodyTooLarge {
		t.Fatalf("Content-Length over the limit: %d %s", res.status, res.body)
	}

	// A client that promises 1000 bytes and closes after 10.
	nc, err := net.DialTimeout("tcp", r.Key.ListenAddr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(nc, "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 1000\r\n\r\n--b\r\nabcd")
	_ = nc.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("short body: no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(HeaderError) != CodeBadRequestBody {
		t.Fatalf("short body: %d %q", resp.StatusCode, resp.Header.Get(HeaderError))
	}
	// The endpoint is still healthy: a good request goes through.
	if res := post(t, c, ruleURL(r)+"/v1/completions", `{"prompt":"x"}`); res.status != 200 {
		t.Fatalf("after client body failures: %d %s", res.status, res.body)
	}
}

// TestAllowedPaths: a rule's allowed_paths restores a strict surface.
func TestAllowedPaths(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	r.AllowedPaths = []string{"/v1/completions", "/v1/models/*"}
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	if res := post(t, c, ruleURL(r)+"/v1/completions", `{"prompt":"x"}`); res.status != 200 {
		t.Fatalf("allowed path: %d %s", res.status, res.body)
	}
	before := len(e.Requests())
	res := post(t, c, ruleURL(r)+"/v1/embeddings", `{"input":"x"}`)
	if res.status != 404 || errorCode(t, res.body) != CodePathNotAllowed {
		t.Fatalf("outside allowed_paths: %d %s", res.status, res.body)
	}
	if n := len(e.Requests()) - before; n != 0 {
		t.Fatalf("engine saw %d requests outside allowed_paths", n)
	}
}

// TestStreamedBodyRetriedOnDialFailure: a dial failure happens before the
// first body byte is read, so even a streamed upload is retried on the
// next endpoint, and that engine gets every byte.
func TestStreamedBodyRetriedOnDialFailure(t *testing.T) {
	rt, _ := newTestRuntime(t, testOptions())
	dead := freePort(t) // nothing listens there
	e := startEngine(t, "live")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin,
		epFor(t, fmt.Sprintf("127.0.0.1:%d", dead), 1), epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	c := testClient()
	const size = 1<<20 + 3
	for i := range 2 { // round-robin starts on either endpoint: both orders
		res := uploadTranscription(t, c, ruleURL(r), size, -1)
		if res.status != 200 || res.header.Get(fakeengine.HeaderUploadBytes) != strconv.Itoa(size) || res.header.Get(fakeengine.HeaderEngine) != "live" {
			t.Fatalf("upload %d: %d %v %s", i, res.status, res.header, res.body)
		}
		if res.header.Get(HeaderRequestID) == "" {
			t.Fatalf("upload %d: no X-Request-Id", i)
		}
	}
}

// TestStreamedBodyTimeouts: a streamed upload may last longer than
// BodyReadTimeout while bytes keep coming (it is an idle bound there), but
// not longer than StreamedBodyTimeout in all.
func TestStreamedBodyTimeouts(t *testing.T) {
	o := testOptions()
	o.BodyReadTimeout = 500 * time.Millisecond
	o.StreamedBodyTimeout = 1500 * time.Millisecond
	rt, _ := newTestRuntime(t, o)
	e := startEngine(t, "e1")
	r := newRule("127.0.0.1", freePort(t), spec.SelRoundRobin, epFor(t, e.Addr(), 1))
	if err := rt.Install(nil, r); err != nil {
		t.Fatal(err)
	}
	trickle := func(chunks int) *http.Response {
		t.Helper()
		pr, pw := io.Pipe()
		go func() {
			for range chunks {
				if _, err := pw.Write([]byte("0123456789")); err != nil {
					return
				}
				time.Sleep(40 * time.Millisecond)
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, ruleURL(r)+"/v1/audio/speech", pr)
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := testClient().Do(req)
		if err != nil {
			t.Fatalf("trickle %d: %v", chunks, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	// 15 chunks 40 ms apart: 600 ms in all, beyond BodyReadTimeout.
	if resp := trickle(15); resp.Header.Get(HeaderError) != "" {
		t.Fatalf("an upload that keeps sending was cut: %d %q", resp.StatusCode, resp.Header.Get(HeaderError))
	}
	// 75 chunks: 3 s, twice StreamedBodyTimeout.
	if resp := trickle(75); resp.StatusCode != http.StatusBadRequest || resp.Header.Get(HeaderError) != CodeBadRequestBody {
		t.Fatalf("an upload beyond StreamedBodyTimeout: %d %q", resp.StatusCode, resp.Header.Get(HeaderError))
	}
}
