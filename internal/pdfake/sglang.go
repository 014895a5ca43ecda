package pdfake

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// rendezvous is one bootstrap room: the prefill and the decode each close
// their channel on arrival and wait for the other's.
type rendezvous struct {
	prefillOnce, decodeOnce sync.Once
	prefill, decode         chan struct{}
}

func (e *Engine) room(id uint64) *rendezvous {
	e.mu.Lock()
	defer e.mu.Unlock()
	rv, ok := e.rooms[id]
	if !ok {
		rv = &rendezvous{prefill: make(chan struct{}), decode: make(chan struct{})}
		e.rooms[id] = rv
	}
	return rv
}

// triple is SGLang's bootstrap triple.
type triple struct {
	Host string `json:"bootstrap_host"`
	Port uint16 `json:"bootstrap_port"`
	Room uint64 `json:"bootstrap_room"`
}

// parseTriple validates the triple the way SGLang's request model does.
func parseTriple(req map[string]json.RawMessage) (triple, error) {
	var t triple
	h, hok := req[fieldBootstrapHost]
	p, pok := req[fieldBootstrapPort]
	r, rok := req[fieldBootstrapRoom]
	if !hok || !pok || !rok {
		return t, fmt.Errorf("TRIPLE-MISSING")
	}
	if err := json.Unmarshal(h, &t.Host); err != nil {
		return t, fmt.Errorf("bootstrap_host: %w", err)
	}
	if err := json.Unmarshal(p, &t.Port); err != nil {
		return t, fmt.Errorf("bootstrap_port: %w", err)
	}
	room, err := strconv.ParseUint(string(r), 10, 64)
	if err != nil || room > 1<<63-1 {
		return t, fmt.Errorf("ROOM-RANGE-ERROR: %s", r)
	}
	t.Room = room
	return t, nil
}

// sglang answers like an SGLang prefill or decode server in PD mode. The
// prefill blocks until a decode joins its room on the bootstrap server, so a
// gateway that sends the legs one after the other times out.
func (x *exchange) sglang() {
	t, err := parseTriple(x.req)
	if err != nil {
		x.reject(http.StatusBadRequest, err.Error())
		return
	}
	timeout := time.NewTimer(x.e.cfg.RendezvousTimeout)
	defer timeout.Stop()
	if x.e.cfg.Role == Prefill {
		if h := x.e.host(); h != "" && t.Host != h {
			x.reject(http.StatusBadRequest, "HOST-MISMATCH: "+t.Host)
			return
		}
		if t.Port != x.e.bootPort {
			x.reject(http.StatusBadRequest, "PORT-MISMATCH: "+strconv.Itoa(int(t.Port)))
			return
		}
		rv := x.e.room(t.Room)
		rv.prefillOnce.Do(func() { close(rv.prefill) })
		defer x.e.dropRoom(t.Room)
		select {
		case <-rv.decode:
		case <-timeout.C:
			x.setViolation("RENDEZVOUS-TIMEOUT")
			x.writeError(http.StatusInternalServerError, "bootstrap rendezvous timed out")
			return
		case <-x.r.Context().Done():
			x.e.update(func() { x.rec.Cancelled = true })
			return
		case <-x.e.stop:
			return
		}
		x.answer("", "length", x.sglangMeta(), nil)
		return
	}
	if err := x.e.join(x.r.Context(), t); err != nil {
		if x.r.Context().Err() != nil {
			x.e.update(func() { x.rec.Cancelled = true })
			return
		}
		x.setViolation("JOIN-FAILED: " + err.Error())
		x.writeError(http.StatusInternalServerError, "bootstrap join failed")
		return
	}
	x.answer("Hello from the fake SGLang decode, the answer is 42.", "stop", x.sglangMeta(), nil)
}

// sglangMeta is SGLang's meta_info for a request with return_logprob:
// input_token_logprobs as [logprob, token id, text] triples. The prompt's
// are computed where the prompt ran: a prefill reports them, a PD decode
// only its first position (SGLang's router prepends the prefill's).
func (x *exchange) sglangMeta() map[string]any {
	if string(x.req["return_logprob"]) != "true" {
		return nil
	}
	lp := [][]any{{-0.25, 3, nil}}
	if x.e.cfg.Role == Prefill {
		lp = [][]any{{nil, 1, nil}, {-1.5, 2, nil}}
	}
	return map[string]any{"meta_info": map[string]any{"input_token_logprobs": lp}}
}

func (e *Engine) dropRoom(id uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.rooms, id)
}

// join registers a decode in its prefill's room and waits for the prefill.
func (e *Engine) join(ctx context.Context, t triple) error {
	b, _ := json.Marshal(t)
	url := "http://" + net.JoinHostPort(t.Host, strconv.Itoa(int(t.Port))) + "/join"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("build join: %w", err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("join %s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("join %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// serveJoin is the prefill's bootstrap server: a decode announces itself
// and waits until the prefill for the same room has arrived.
func (e *Engine) serveJoin(w http.ResponseWriter, r *http.Request) {
	var t triple
	if err := json.NewDecoder(r.Body).Decode(&t); err != nil {
		http.Error(w, "bad join", http.StatusBadRequest)
		return
	}
	if h := e.host(); (h != "" && t.Host != h) || t.Port != e.bootPort {
		http.Error(w, "TRIPLE-MISMATCH", http.StatusBadRequest)
		return
	}
	rv := e.room(t.Room)
	rv.decodeOnce.Do(func() { close(rv.decode) })
	timeout := time.NewTimer(e.cfg.RendezvousTimeout)
	defer timeout.Stop()
	select {
	case <-rv.prefill:
		w.WriteHeader(http.StatusOK)
	case <-timeout.C:
		http.Error(w, "RENDEZVOUS-TIMEOUT", http.StatusGatewayTimeout)
	case <-r.Context().Done():
	case <-e.stop:
	}
}
