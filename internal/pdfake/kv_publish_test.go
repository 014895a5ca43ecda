package pdfake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/kvexact"
	"github.com/infergate/infergate/kvexact/zmqsub"
)

// TestKVPublishing drives a KV-publishing fake vLLM prefill through a real
// zmqsub subscriber into a real inventory: stores only new blocks chained to
// the cached prefix, /tokenize agrees with what was published, and the
// restart admin clears the inventory.
func TestKVPublishing(t *testing.T) {
	for _, enc := range []bool{false, true} {
		t.Run(fmt.Sprintf("map=%v", enc), func(t *testing.T) {
			cfg := DefaultConfig(VLLM, Prefill)
			cfg.KV = KVConfig{ZMQPort: -1, BlockSize: 4, MapEncoding: enc}
			e, err := Start(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var port int
			if _, err := fmt.Sscanf(e.KVEndpoint()[strings.LastIndexByte(e.KVEndpoint(), ':')+1:], "%d", &port); err != nil {
				t.Fatal(err)
			}
			inv := kvexact.NewInventory(kvexact.Options{Rule: "r", BlockSize: 4, Warmup: time.Hour})
			id := e.AddrPort().String()
			sub, err := zmqsub.Start(zmqsub.Target{Endpoint: id, Host: "127.0.0.1", Port: port}, inv, zmqsub.DefaultOptions("r"))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if err := e.KVPublisher().WaitSubscribers(1, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			base := "http://" + id
			prompt := "a b c d e f g h i j"   // 10 words: 2 full blocks
			longer := prompt + " k l m n o p" // 16 words: 4 blocks, 2 new
			complete(t, base, prompt)
			complete(t, base, longer)
			tokens := tokenizeVia(t, base, `{"model":"fake-model","prompt":"`+longer+`"}`)
			if len(tokens) != 16 || fmt.Sprint(tokens) != fmt.Sprint(FakeTokens(longer)) {
				t.Fatalf("/tokenize = %v", tokens)
			}
			kvWaitUntil(t, "4 blocks indexed", func() bool { return inv.ScoreTokens(tokens, []string{id})[0].Blocks == 4 })
			if n, _ := inv.NextSeq(id, 0); n != 2 {
				t.Fatalf("next seq = %d, want 2 (one batch per prompt with new blocks)", n)
			}
			// Chat prompts are templated before tokenising, like the engine.
			chat := `{"model":"fake-model","messages":[{"role":"user","content":"hello there"}]}`
			if got, want := tokenizeVia(t, base, chat), FakeTokens(FakeChatTemplate([]chatMessage{{"user", "hello there"}})); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("chat /tokenize = %v, want %v", got, want)
			}
			kvPost(t, base+"/admin/kv/restart", "")
			kvWaitUntil(t, "restart clears", func() bool { return inv.Blocks(id) == 0 })
			// The restart is a regression to seq 0: the empty engine's whole
			// stream is seen, so the cleared rank is trusted at once.
			kvWaitUntil(t, "trusted after the restart from seq 0", func() bool { ok, _ := inv.Trusted(id); return ok })
			kvPost(t, base+"/admin/kv/stop", "")
			complete(t, base, longer)
			kvPost(t, base+"/admin/kv/start", "")
			complete(t, base, "x y z w")
			kvWaitUntil(t, "publishing resumed", func() bool { return inv.Blocks(id) == 1 })
			if s := inv.ScoreTokens(tokens, []string{id}); s[0].Blocks != 0 {
				t.Fatalf("blocks computed while stopped were published: %+v", s)
			}
		})
	}
}

func complete(t *testing.T, base, prompt string) {
	t.Helper()
	body := `{"model":"fake-model","prompt":"` + prompt + `","max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`
	kvPost(t, base+"/v1/completions", body)
}

func tokenizeVia(t *testing.T, base, body string) []uint32 {
	t.Helper()
	var out struct {
		Tokens []uint32 `json:"tokens"`
		Count  int      `json:"count"`
	}
	if err := json.Unmarshal(kvPost(t, base+"/tokenize", body), &out); err != nil || out.Count != len(out.Tokens) {
		t.Fatalf("/tokenize answer: %v %+v", err, out)
	}
	return out.Tokens
}

func kvPost(t *testing.T, url, body string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b.String())
	}
	return b.Bytes()
}

func kvWaitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
